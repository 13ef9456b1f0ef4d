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
from pathlib import Path
from typing import Any, Optional

import typer
from nats.errors import NoServersError
from rich.console import Console

from bke.adapters.bus import EventWatch
from bke.adapters.bus.connect import BusAccess, connect_nats
from bke.adapters.bus.streams import require_streams
from bke.contracts.reset import (
    DELETE_OWNERS, RESET_ACCEPTED, RESET_CLUSTER, RESET_REJECTED, ResetCluster, removed_subject, reset_subject,
)

from .connect import resolve_nats
from .output import EXIT_FAILURE, EXIT_INVALID, die, error_lines, quiet_bus_errors, where

__all__ = ["register"]

ANSWER_TIMEOUT_S = 30.0
WORKDIR = typer.Option(None, "--workdir", help="a lab's work directory (its NATS and credentials)")
NATS = typer.Option(None, "--nats", help="NATS URL of a running deployment")
YES = typer.Option(False, "--yes", "-y", help="do not ask for confirmation")
TIMEOUT = typer.Option(3600.0, "--timeout", help="seconds to follow the reset before giving up watching")


async def _follow(nats: BusAccess | str, req: ResetCluster, timeout: float, say: Any) -> dict[str, Any]:
    """Send the request and follow it; {"rejected": msg} | {"view": last view, "removed": {service: keys}}."""
    nc = await connect_nats(nats, error_cb=quiet_bus_errors)
    out: dict[str, Any] = {"removed": {}}
    try:
        js = nc.jetstream()
        await require_streams(js)
        subjects = [RESET_ACCEPTED, RESET_REJECTED, reset_subject(req.cluster), removed_subject(req.cluster)]
        async with EventWatch(nc, subjects) as watch:
            await js.publish(RESET_CLUSTER, req.to_bytes(), headers={"Nats-Msg-Id": f"reset:{req.request_id}"})
            mine = lambda e: e.data.get("requestId") == req.request_id  # noqa: E731
            first = await watch.wait_for(lambda e: mine(e) and e.subject in (RESET_ACCEPTED, RESET_REJECTED),
                                         ANSWER_TIMEOUT_S)
            if first.subject == RESET_REJECTED:
                return {"rejected": first.data.get("message", "")}
            say(f"{'delete' if req.delete else 'reset'} of {req.cluster} started: {', '.join(first.data.get('nodes', []))}")
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            shown = 0
            while True:
                n = len(watch.seen)
                for e in watch.seen[shown:n]:
                    if e.subject == reset_subject(req.cluster) and e.data.get("reset", {}).get("requestId") == req.request_id:
                        view = e.data["reset"]
                        out["view"] = view
                        snaps = ", ".join(f"{s['etcdCluster']} {s['status']}" for s in view.get("snapshots", []))
                        say(f"  snapshots: {snaps or 'none'}; nodes {view['done']}/{view['total']} {view['status']}")
                    if e.subject == removed_subject(req.cluster) and mine(e):
                        out["removed"][e.data.get("service", "?")] = e.data.get("keys", 0)
                shown = n
                view = out.get("view") or {}
                finished = view.get("status") in ("Succeeded", "Failed")
                if finished and (not req.delete or view["status"] == "Failed" or set(DELETE_OWNERS) <= out["removed"].keys()):
                    return out
                left = deadline - loop.time()
                if finished and req.delete:
                    left = min(left, ANSWER_TIMEOUT_S)  # the services answer within seconds of the end
                    deadline = min(deadline, loop.time() + ANSWER_TIMEOUT_S)
                if left <= 0 or not await watch.wait_more(n, left):
                    out["timed_out"] = True
                    return out
    finally:
        await nc.close()


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
        for host in sorted(sup.pids().get("agents", {})):
            sup.stop_agent(host)
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
    except (OSError, NoServersError) as exc:
        die(f"cannot reach NATS at {where(nurl)}: {exc}", EXIT_FAILURE)
    except TimeoutError:
        die(f"the dispatcher did not answer within {ANSWER_TIMEOUT_S:.0f}s (is it running?)", EXIT_FAILURE)
    if "rejected" in out:
        die(f"refused: {out['rejected']}", EXIT_INVALID)
    view = out.get("view") or {}
    if view.get("status") == "Failed":
        die(f"{what} failed: {view.get('message', '')}", EXIT_FAILURE)
    if view.get("status") != "Succeeded":
        die(f"{what}: still {view.get('status', 'not started')} after {timeout:.0f}s; follow it with `bke status {name}`")
    if delete:
        missing = [s for s in DELETE_OWNERS if s not in out["removed"]]
        if missing:
            die(f"every node is reset, but {', '.join(missing)} did not say it removed its records of {name} "
                f"within {ANSWER_TIMEOUT_S:.0f}s (is it running?); it does when it reads bke.v1.cluster.deleted")
        keys = sum(out["removed"].values())
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
