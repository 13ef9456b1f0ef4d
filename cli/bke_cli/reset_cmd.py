"""`bke reset NAME [--nodes a,b]` and `bke delete NAME`: undo BKE's work on a cluster's nodes
(bke.contracts.reset).

Both ask for confirmation unless `--yes`, send `ResetCluster` to the dispatcher and follow its
`ResetChanged` events (snapshots first, then the nodes) to the end. A delete then waits for
every service to say it removed its records (`StateRemoved` from each of DELETE_OWNERS) and
revokes the cluster's agents' bus identities through `bke identities revoke --cluster`: in a
lab (`--workdir`) at once (and the lab's agent processes of the cluster are stopped); for a
deployment (`--nats`) with `--redis`, BKE_KEY_FILE_AUTHORITY and `--system-creds` (a system-account
user that pushes the account update), else it says what to run.

Exit codes: 0 done; 1 failed (a node, a snapshot, a service that did not answer, NATS away);
2 refused (another operation runs, unknown node, bad name).
"""
from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import typer
from nats.errors import NoServersError
from rich.console import Console

from bke.adapters.bus.connect import BusAccess
from bke.contracts.statuses import OperationStatus
from bke.contracts.reset import (
    DELETE_OWNERS, RESET_ACCEPTED, RESET_CLUSTER, RESET_REJECTED, ResetCluster, removed_subject, reset_subject,
)

from .connect import resolve_nats
from .follow import Follow, Progress, Views, follow, publish
from .output import EXIT_FAILURE, EXIT_INVALID, die, error_lines, quiet_bus_errors, where

__all__ = ["register"]

ANSWER_TIMEOUT_S = 30.0
WORKDIR = typer.Option(None, "--workdir", help="a lab's work directory (its NATS and credentials)")
NATS = typer.Option(None, "--nats", help="NATS URL of a running deployment")
YES = typer.Option(False, "--yes", "-y", help="do not ask for confirmation")
TIMEOUT = typer.Option(3600.0, "--timeout", help="seconds to follow the reset before giving up watching")


@dataclass
class _Seen:
    """What a reset's follow saw: a refusal, or its last view and which services said they
    removed their records (a delete's `StateRemoved`, by service: keys)."""

    rejected: str | None = None
    view: dict[str, Any] = field(default_factory=dict)
    removed: dict[str, int] = field(default_factory=dict)


def _view_line(view: dict[str, Any]) -> str:
    snaps = ", ".join(f"{s['etcdCluster']} {s['status']}" for s in view.get("snapshots", []))
    return f"  snapshots: {snaps or 'none'}; nodes {view['done']}/{view['total']} {view['status']}"


async def _follow(nats: BusAccess | str, req: ResetCluster, timeout: float, say: Any) -> _Seen:
    """Send the request and follow it to its end (a delete's: every owner's answer too, or a wait
    of ANSWER_TIMEOUT_S for them); TimeoutError if the dispatcher does not answer."""
    seen = _Seen()

    def done() -> _Seen | None:
        status = seen.view.get("status")
        over = status == OperationStatus.FAILED or (status == OperationStatus.SUCCEEDED and (not req.delete or set(DELETE_OWNERS) <= seen.removed.keys()))
        return seen if over else None

    def started(doc: dict[str, Any]) -> None:
        say(f"{'delete' if req.delete else 'reset'} of {req.cluster} started: {', '.join(doc.get('nodes', []))}")

    def refused(doc: dict[str, Any]) -> _Seen:
        seen.rejected = doc.get("message", "")
        return seen

    def removed(doc: dict[str, Any]) -> _Seen | None:
        seen.removed[doc.get("service", "?")] = doc.get("keys", 0)
        return done()

    def ended(view: dict[str, Any]) -> _Seen | None:
        seen.view = view
        return done()

    def gave_up(progress: Progress) -> _Seen:
        seen.view = progress.view or {}
        return seen

    return await follow(nats, Follow(
        request_id=req.request_id, send=publish(RESET_CLUSTER, req.to_bytes(), f"reset:{req.request_id}"),
        answers={RESET_ACCEPTED: started, RESET_REJECTED: refused, removed_subject(req.cluster): removed},
        gave_up=gave_up, answer_within=ANSWER_TIMEOUT_S,
        views=Views(reset_subject(req.cluster), "reset", _view_line, say, end=ended, every_line=True,
                    settle=ANSWER_TIMEOUT_S)),  # the services answer within seconds of the end
        timeout, error_cb=quiet_bus_errors)


def _revoke(name: str, workdir: Optional[Path], nats_url: Optional[str], redis_url: Optional[str],
            system_creds: Optional[Path], console: Console) -> bool:
    """The cluster's agents' identities, revoked through `bke identities revoke --cluster`."""
    from . import identities_cmd

    if workdir is None and not (redis_url and nats_url and system_creds):
        error_lines([f"the bus identities of {name}'s agents are not revoked: run `bke identities revoke --cluster "
                     f"{name} --redis URL --nats URL --system-creds FILE` (BKE_KEY_FILE_AUTHORITY set)"])
        return False
    identities_cmd.revoke_cmd(None, name, workdir, redis_url, nats_url, system_creds)
    if workdir is not None:  # the lab's agent processes of the cluster go too (their pods are stopped)
        from bke.lab.supervisor import LabSupervisor

        sup = LabSupervisor(workdir)
        sup.stop_agents(sorted(sup.pids().get("agents", {})))
        console.print(f"lab agents of {name} stopped", highlight=False)
    return True


def _run(name: str, nodes: list[str], delete: bool, yes: bool, timeout: float, workdir: Optional[Path],
         nats_url: Optional[str], redis_url: Optional[str] = None, system_creds: Optional[Path] = None) -> None:
    try:
        req = ResetCluster(request_id=str(uuid.uuid4()), cluster=name, nodes=nodes, delete=delete)
    except ValueError as exc:
        die(f"NAME: {' '.join(str(exc).split())}", EXIT_INVALID)
    what = f"delete cluster {name}" if delete else f"reset {', '.join(nodes) if nodes else 'every node'} of {name}"
    if not yes and not typer.confirm(f"{what}: BKE's files, pods and etcd data go (snapshots are kept). Go on?"):
        raise typer.Exit(EXIT_INVALID)
    nurl = resolve_nats(workdir, nats_url)
    console = Console(soft_wrap=True)  # lines are not cut at 80 columns when piped
    try:
        out = asyncio.run(_follow(nurl, req, timeout, lambda line: console.print(line, highlight=False)))
    except TimeoutError:  # before OSError, of which it is a subclass
        die(f"the dispatcher did not answer within {ANSWER_TIMEOUT_S:.0f}s (is it running?)", EXIT_FAILURE)
    except (OSError, NoServersError) as exc:
        die(f"cannot reach NATS at {where(nurl)}: {exc}", EXIT_FAILURE)
    if out.rejected is not None:
        die(f"refused: {out.rejected}", EXIT_INVALID)
    view = out.view
    if view.get("status") == OperationStatus.FAILED:
        die(f"{what} failed: {view.get('message', '')}", EXIT_FAILURE)
    if view.get("status") != OperationStatus.SUCCEEDED:
        die(f"{what}: still {view.get('status', 'not started')} after {timeout:.0f}s; follow it with `bke status {name}`")
    if delete:
        missing = [s for s in DELETE_OWNERS if s not in out.removed]
        if missing:
            die(f"every node is reset, but {', '.join(missing)} did not say it removed its records of {name} "
                f"within {ANSWER_TIMEOUT_S:.0f}s (is it running?); it does when it reads bke.v1.cluster.deleted")
        keys = sum(out.removed.values())
        console.print(f"records of {name} removed by {', '.join(DELETE_OWNERS)} ({keys} keys)", highlight=False)
        if not _revoke(name, workdir, nats_url, redis_url, system_creds, console):
            raise typer.Exit(EXIT_FAILURE)
    console.print(f"{what}: done", highlight=False)


def reset(
    name: str = typer.Argument(..., help="cluster name"),
    nodes: str = typer.Option("", "--nodes", help="comma-separated hostnames (default: every node)"),
    yes: bool = YES,
    timeout: float = TIMEOUT,
    workdir: Optional[Path] = WORKDIR,
    nats_url: Optional[str] = NATS,
) -> None:
    """Reset nodes (an etcd snapshot of every etcd cluster first, kept in BKE's store)."""
    _run(name, [n.strip() for n in nodes.split(",") if n.strip()], False, yes, timeout, workdir, nats_url)


def delete(
    name: str = typer.Argument(..., help="cluster name"),
    yes: bool = YES,
    timeout: float = TIMEOUT,
    workdir: Optional[Path] = WORKDIR,
    nats_url: Optional[str] = NATS,
    redis_url: Optional[str] = typer.Option(None, "--redis", envvar="BKE_REDIS_URL",
                                            help="with --nats: the registry of bus identities (to revoke the agents')"),
    system_creds: Optional[Path] = typer.Option(None, "--system-creds", help="with --nats: pushes the revocation"),
) -> None:
    """Reset every node, remove the cluster's records from every service, revoke its agents."""
    _run(name, [], True, yes, timeout, workdir, nats_url, redis_url, system_creds)


def register(app: typer.Typer) -> None:
    app.command("reset")(reset)
    app.command("delete")(delete)
