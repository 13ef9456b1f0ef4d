"""`bke lab join-nodes` and `bke lab remove-nodes`: workers joining and leaving a lab cluster.

    bke lab join-nodes NAME --nodes a,b --workdir DIR     # the stored plan already names a and b
    bke lab remove-nodes NAME --nodes a --workdir DIR

join-nodes starts the named nodes' agents the way `bke lab install` does (keys made and
provisioned first, then the processes), then sends `JoinNodes` with the stored plan's digest
and follows it to `join-nodes.finished`. remove-nodes sends `RemoveNodes`, follows it, then,
holding the lab's NATS authority, revokes the identities the dispatcher names and stops those
agents' processes (what `bke delete` does for a whole cluster). Swapping in the plan that adds
or drops the nodes is `bke apply`'s (its runner in the upgrader calls the same two commands).

Exit codes: 0 succeeded, 1 failed (a node, a service, a request the dispatcher gave up on) or not
finished in time, 2 refused (the answer's `kind` "invalid"); the reason is printed.
"""
from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from bke.adapters.bus.connect import BusAccess
from bke.contracts.statuses import FinishedStatus, NodeStatus
from bke.contracts.membership import (
    JOIN_NODES, JOIN_NODES_FINISHED, REMOVE_NODES, REMOVE_NODES_FINISHED, JoinNodes, RemoveNodes,
    join_changed_subject, remove_changed_subject,
)

from .drain_flags import DRAIN_EMPTYDIR, DRAIN_FORCE, drain_options
from .follow import Follow, Views, follow, publish
from .output import EXIT_FAILURE, EXIT_INVALID, error_lines, quiet_bus_errors

__all__ = ["follow_membership", "refused", "register", "retire_agents"]

WORKDIR = typer.Option(..., "--workdir", help="the lab's work directory")
NODES = typer.Option(..., "--nodes", help="hostnames, comma-separated")
TIMEOUT = typer.Option(900.0, "--timeout", help="seconds to follow before giving up watching")


def _subjects(req: JoinNodes | RemoveNodes) -> tuple[str, str, str, str]:
    """What the request is sent on, answered on and followed on, and its view's field there."""
    if isinstance(req, JoinNodes):
        return JOIN_NODES, JOIN_NODES_FINISHED, join_changed_subject(req.cluster), "join"
    return REMOVE_NODES, REMOVE_NODES_FINISHED, remove_changed_subject(req.cluster), "removal"


def _nodes_line(view: dict[str, Any]) -> str:
    nodes = ", ".join(f"{x['hostname']} {x['stage']} {x['status']}" for x in view.get("nodes", []))
    return f"  {nodes}{'; ' + view['waiting'] if view.get('waiting') else ''}"


async def follow_membership(access: BusAccess | str, req: JoinNodes | RemoveNodes, timeout: float,
                            say: Any = lambda line: None) -> dict[str, Any]:
    """Send the request and wait for its `finished` event (the wire document), or {} on timeout."""
    subject, finished, changed, key = _subjects(req)
    return await follow(access, Follow(
        request_id=req.request_id, send=publish(subject, req.to_bytes(), f"{subject}:{req.request_id}"),
        answers={finished: dict}, gave_up=lambda seen: {},
        views=Views(changed, key, _nodes_line, say, every_line=True)), timeout, error_cb=quiet_bus_errors)


def refused(done: dict[str, Any]) -> bool:
    """Whether a Failed answer is a refusal (exit 2) rather than a failure (exit 1): its `kind`;
    a dispatcher older than the field refused exactly when it named no node."""
    if "kind" in done:
        return done["kind"] == "invalid"
    return not done.get("nodes")


def _exit(done: dict[str, Any], console: Console) -> None:
    if not done:
        error_lines(["not finished in time (the dispatcher goes on: see its log)"])
        raise typer.Exit(EXIT_FAILURE)
    if done["status"] != FinishedStatus.SUCCEEDED:
        error_lines([done.get("reason", "")])
        raise typer.Exit(EXIT_INVALID if refused(done) else EXIT_FAILURE)
    console.print(f"{', '.join(n['hostname'] for n in done['nodes'])}: {done['status']}", highlight=False)


def join_nodes(name: str, nodes: str = NODES, workdir: Path = WORKDIR, timeout: float = TIMEOUT) -> None:
    """Start the named nodes' agents and join them (the stored plan must already name them)."""
    from bke.adapters.state.client import redis_client
    from bke.adapters.state.plans import RedisPlanStore

    from .lab_cmd import running_lab

    hosts = [h for h in nodes.split(",") if h]
    console = Console()
    sup, info = running_lab(workdir)

    async def stored() -> tuple[Any, str]:
        r = redis_client(info.redis_url)  # the lab's admin user, as the supervisor's own probes
        try:
            store = RedisPlanStore(r)
            meta = await store.meta(name)
            return (await store.load(name), meta.digest) if meta else (None, "")
        finally:
            await r.aclose()

    plan, digest = asyncio.run(stored())
    if plan is None:
        error_lines([f"cluster {name} has no plan in {workdir}"])
        raise typer.Exit(EXIT_INVALID)
    missing = [h for h in hosts if h not in {n.hostname for n in plan.nodes}]
    if missing:
        error_lines([f"nodes: not in the stored plan of {name}: {', '.join(missing)} (swap in the plan that names them first)"])
        raise typer.Exit(EXIT_INVALID)
    sup.ensure_agents(info, plan, only=hosts)
    req = JoinNodes(request_id=str(uuid.uuid4()), cluster=name, plan_digest=digest, nodes=hosts)
    done = asyncio.run(follow_membership(sup.operator_access(info), req, timeout, console.print))
    _exit(done, console)


def remove_nodes(name: str, nodes: str = NODES, workdir: Path = WORKDIR, timeout: float = TIMEOUT,
                 drain_force: bool = DRAIN_FORCE, drain_delete_emptydir_data: bool = DRAIN_EMPTYDIR) -> None:
    """Remove workers: drain, delete the Node, reset; then revoke their agents and stop them."""
    from .lab_cmd import running_lab

    hosts = [h for h in nodes.split(",") if h]
    console = Console()
    sup, info = running_lab(workdir)
    req = RemoveNodes(request_id=str(uuid.uuid4()), cluster=name, nodes=hosts,
                      drain=drain_options(drain_force, drain_delete_emptydir_data))
    done = asyncio.run(follow_membership(sup.operator_access(info), req, timeout, console.print))
    retire_agents(sup, info, done.get("revokeIdentities", []),
                  [n["hostname"] for n in done.get("nodes", []) if n["status"] == NodeStatus.SUCCEEDED], console)
    _exit(done, console)


def retire_agents(sup: Any, info: Any, identities: list[str], hosts: list[str], console: Console) -> None:
    """After a removal: the removed agents' bus identities revoked (the lab holds the NATS
    authority; a deployment runs `bke identities revoke NAME`) and their processes stopped."""
    keeper = sup.identities(info)
    try:
        for identity in identities:
            if keeper is not None:
                keeper.revoke(identity)
                console.print(f"{identity}: revoked", highlight=False)
    finally:
        if keeper is not None:
            keeper.close()
    for host in hosts:
        sup.stop_agent(host)
        console.print(f"{host}: agent stopped", highlight=False)


def register(app: typer.Typer) -> None:
    from .lab_cmd import lab

    lab.command("join-nodes")(join_nodes)
    lab.command("remove-nodes")(remove_nodes)
