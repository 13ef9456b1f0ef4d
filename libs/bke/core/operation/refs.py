"""The operation a result answers (bke.contracts.operation_ref): the one its agent echoed, else,
for an agent of an earlier release that echoes none, the one its command id names.

Why the fallback reads the id: an agent that forbids unknown fields is sent commands without an
operation (bke.core.secrets.binding, OPERATION_REFS), so its answers carry none. Every command
id has the form `<cluster>/<slug>/<node>/<generation>`, and each operation's slug starts with its
own prefix (`LEGACY_SLUGS`, held to the operations' own by tests/unit/core/test_operation_refs.py);
an install phase's slug is its phase's name. Kept for one release, until every agent echoes.
"""
from __future__ import annotations

from bke.contracts.agent import CommandResult
from bke.contracts.agent_steps import COMMAND_KEY_PHASE
from bke.contracts.operation_ref import OperationKind, OperationRef

__all__ = ["LEGACY_SLUGS", "ref_of", "ref_of_command_id"]

# slug prefix -> the operation whose commands carry it (the operations' SLUG_PREFIX constants)
LEGACY_SLUGS: tuple[tuple[str, OperationKind], ...] = (
    ("upgrade@", OperationKind.UPGRADE),
    ("restore@", OperationKind.ETCD_RESTORE),
    ("rotate@", OperationKind.ROTATION),
    ("reset@", OperationKind.RESET),
    ("join@", OperationKind.JOIN),
    ("remove@", OperationKind.REMOVAL),
    ("health@", OperationKind.HEALTH),
)


def ref_of_command_id(command_id: str) -> OperationRef | None:
    """The operation a command id names; None for an id not of the form every sender uses."""
    parts = command_id.split("/")
    if len(parts) != 4 or not all(parts):
        return None
    slug = parts[1]
    if slug == COMMAND_KEY_PHASE:
        return OperationRef(kind=OperationKind.COMMAND_KEY)
    for prefix, kind in LEGACY_SLUGS:
        if slug.startswith(prefix):
            return OperationRef(kind=kind, step=slug)
    return OperationRef(kind=OperationKind.INSTALL, step=slug)


def ref_of(res: CommandResult) -> OperationRef | None:
    """The operation `res` answers: echoed by its agent, else named by its command id."""
    return res.operation if res.operation is not None else ref_of_command_id(res.command_id)
