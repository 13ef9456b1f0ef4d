"""What a join and a removal of workers refuse alike, in the order both judge it: nodes the
stored plan does not name or that are named twice; then a pause, the install's own refusal,
another operation of the cluster, and another request of the same kind still running. Pure:
the records and gates are read by the caller (`gates.read_gates`)."""
from __future__ import annotations

from collections.abc import Container, Sequence

from bke.contracts.statuses import OperationStatus
from bke.core.operation import OperationRecord

__all__ = ["gates_refusal", "nodes_refusal"]


def nodes_refusal(nodes: Sequence[str], planned: Container[str], cluster: str, hint: str = "") -> str:
    """Why the request's nodes are wrong ("" if they are not); `hint` follows the unknown ones."""
    unknown = sorted(h for h in nodes if h not in planned)
    if unknown:
        return f"nodes: not in the stored plan of {cluster}: {', '.join(unknown[:5])}{hint}"
    if len(set(nodes)) != len(nodes):
        return "nodes: a node is named twice"
    return ""


def gates_refusal(cluster: str, request_id: str, *, paused: bool, install: str, busy: str, verb: str,
                  current: OperationRecord | None) -> str:
    """Why the request may not start now ("" if it may). `install`: the operation's own refusal
    of the install's status ("" if none); `busy`: another operation that holds the cluster,
    described; `verb`: what the request does, for "<busy> is running: <verb> after it ends";
    `current`: the cluster's record of this kind, still running unless it is the request's own."""
    if paused:
        return f"{cluster} is paused: resume it first (bke resume {cluster})"
    if install:
        return install
    if busy:
        return f"{busy} of {cluster} is running: {verb} after it ends"
    if current is not None and current.status == OperationStatus.RUNNING and current.request_id != request_id:
        return f"{current.KIND} {current.request_id} of {cluster} is still running"
    return ""
