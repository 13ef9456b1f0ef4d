"""`bke status`, `bke retry`, `bke apply`: talk to a running deployment, over NATS only.

They read a cluster's status from the dispatcher (`bke.v1.status.get`), never from Redis.
"""
from __future__ import annotations

import asyncio
import time
import uuid
from enum import Enum
from pathlib import Path
from typing import Optional

from bke.contracts.base import schema_headers
from bke.adapters.bus.connect import BusAccess, connect_nats
import typer
from nats.errors import NoServersError
from rich.console import Console
from rich.table import Table

from bke.contracts.drain import DrainOptions
from bke.contracts.install import RETRY_INSTALL, RetryInstall
from bke.contracts.membership import MembershipView
from bke.contracts.status import ClusterStatus, NodeSelection, StatusError
from bke.contracts.statuses import InstallStatus, NodeStatus, OperationStatus

from .connect import resolve_nats
from .drain_flags import DRAIN_EMPTYDIR, DRAIN_FORCE, drain_options
from .install_follow import status_table, submit_and_follow
from .output import EXIT_FAILURE, EXIT_INVALID, Fmt, die, error_lines, quiet_bus_errors, where
from .spec_input import plan_or_exit, read_spec_text
from .status_client import StatusUnavailable, get_status
from .upgrade_cmd import retry_upgrade, upgrade_exists

__all__ = ["register"]

WORKDIR = typer.Option(None, "--workdir", help="a lab's work directory")
NATS = typer.Option(None, "--nats", help="NATS URL (or BKE_NATS_URL)")
RETRY_PICKUP_S = 60.0



class Nodes(str, Enum):
    none = "none"
    failed = "failed"
    all = "all"


async def _ask(nats_url: BusAccess | str, cluster: str, nodes: NodeSelection = "failed") -> ClusterStatus | None:
    nc = await connect_nats(nats_url, error_cb=quiet_bus_errors)
    try:
        return await get_status(nc, cluster, nodes)
    finally:
        await nc.close()


def _status_or_exit(nats_url: BusAccess | str, cluster: str, nodes: NodeSelection = "failed") -> ClusterStatus | None:
    try:
        return asyncio.run(_ask(nats_url, cluster, nodes))
    except StatusUnavailable as exc:
        die(str(exc), EXIT_FAILURE)
    except (OSError, NoServersError) as exc:  # NATS itself unreachable
        die(f"cannot reach NATS at {where(nats_url)}: {exc}", EXIT_FAILURE)


def status(
    name: str = typer.Argument(..., help="cluster name"),
    output: Fmt = typer.Option(Fmt.table, "-o", "--output"),
    nodes: Optional[Nodes] = typer.Option(
        None, "--nodes",
        help="which nodes to list: none, failed (failed and running), all (default: failed for the table, all for json)"),
    workdir: Optional[Path] = WORKDIR,
    nats_url: Optional[str] = NATS,
) -> None:
    """Show the install's phases and nodes, as the dispatcher reports them; with `-o json`,
    every node with its applied labels, taints and latest health answer."""
    chosen = nodes or (Nodes.all if output is Fmt.json else Nodes.failed)
    doc = _status_or_exit(resolve_nats(workdir, nats_url), name, chosen.value)  # type: ignore[arg-type]
    if doc is None:
        die(f"cluster {name!r}: not found (no install)", EXIT_INVALID)
    if output is Fmt.json:
        print(doc.model_dump_json(by_alias=True, indent=2))
        return
    console = Console()
    console.print(status_table(doc))
    c = doc.node_counts
    console.print(f"nodes: {c.total} ({c.succeeded} succeeded, {c.running} running, {c.failed} failed, {c.pending} pending)")
    for line in summary_lines(doc):
        console.print(line, markup=False, highlight=False)
    if doc.nodes:
        table = Table("node", "status", "phase", "step", "health")
        for n in doc.nodes:
            health = "" if n.health is None else n.health.status + (f" ({', '.join(n.health.failing)})" if n.health.failing else "")
            table.add_row(n.hostname, n.status, n.phase or "", n.step or "", health)
        console.print(table)
    if doc.addons:  # in the order the addons phase applied them
        table = Table("addon", "version", "status", "pruned")  # pruned: what its new version no longer has
        for name, a in doc.addons.items():
            table.add_row(name, str(a.get("version", "")), str(a.get("status", "")), ", ".join(a.get("pruned", [])))
        console.print(table)
    if doc.rotation is not None:
        r = doc.rotation
        console.print(f"certificate rotation {r.request_id}: {r.status} {r.done}/{r.total} {r.message}")
    if doc.reset is not None:
        z = doc.reset
        console.print(f"{'delete' if z.delete else 'reset'} {z.request_id}: {z.status} {z.done}/{z.total} {z.message}",
                      markup=False, highlight=False)
    for word, m in (("join", doc.join), ("removal", doc.removal)):  # workers joining and leaving
        if m is not None:
            console.print(membership_line(word, m), markup=False, highlight=False)
    if doc.operation is not None:  # one operation per cluster: what runs now, what others are refused for
        o = doc.operation
        console.print(f"running: {o.kind} {o.request_id} since {o.since}", markup=False, highlight=False)
    if doc.refusals is not None:  # forged or misdirected commands and registrations
        f = doc.refusals
        console.print(f"refused: {f.count} (last {f.last_at or ''}: {f.last_reason})", markup=False, highlight=False)


def membership_line(word: str, m: MembershipView) -> str:
    """One line for the running or last join or removal: its outcome, its nodes' stages, and
    why it waits (running) or failed."""
    done = sum(n.status == NodeStatus.SUCCEEDED for n in m.nodes)
    nodes = ", ".join(f"{n.hostname} {n.stage} {n.status}" for n in m.nodes[:5])
    more = f" and {len(m.nodes) - 5} more" if len(m.nodes) > 5 else ""
    why = m.waiting if m.status == OperationStatus.RUNNING else m.message
    return f"{word} {m.request_id}: {m.status} {done}/{len(m.nodes)} ({nodes}{more}){': ' + why if why else ''}"


def _short_label(key: str, value: str) -> str:
    """`node-role.kubernetes.io/worker=worker` reads as `role:worker`: the sets stay one line."""
    if key.startswith("node-role.kubernetes.io/"):
        return "role:" + key.removeprefix("node-role.kubernetes.io/")
    return f"{key}={value}" if value else key


def summary_lines(doc: ClusterStatus) -> list[str]:
    """Health and labels of every node, in a few lines whatever the cluster's size: counts,
    then one line per distinct label set with its node count."""
    h = doc.node_health
    lines = [f"health: {h.healthy} healthy, {h.unhealthy} unhealthy, {h.unknown} not checked yet"
             + (f" (unhealthy: {', '.join(h.unhealthy_nodes)}{' ...' if h.unhealthy > len(h.unhealthy_nodes) else ''})"
                if h.unhealthy else "")]
    if doc.labelled:
        lines.append(f"labels applied on {doc.labelled} node(s):")
        for s in doc.label_sets:
            marks = [_short_label(k, v) for k, v in sorted(s.labels.items())]
            marks += [f"taint:{t.key}{'=' + t.value if t.value else ''}:{t.effect}" for t in s.taints]
            lines.append(f"  {s.nodes:>6}  {' '.join(marks) or '(none)'}")
        if doc.label_sets_more:
            lines.append(f"  ... and {doc.label_sets_more} more distinct label set(s) (bke status -o json)")
    return lines


def _picked_up(before: ClusterStatus, now: ClusterStatus | None) -> bool:
    """The dispatcher took the retry: the install left Failed, or failed again (a new finish)."""
    if now is None:
        return False
    return now.status != InstallStatus.FAILED or [p.finished_at for p in now.phases] != [p.finished_at for p in before.phases]


def retry(
    name: str = typer.Argument(..., help="cluster name"),
    nodes: Optional[str] = typer.Option(None, "--nodes", help="comma-separated hostnames (default: every failed node)"),
    workdir: Optional[Path] = WORKDIR,
    nats_url: Optional[str] = NATS,
    follow: bool = typer.Option(True, help="follow the install afterwards"),
    timeout: float = typer.Option(1800.0, help="seconds to follow"),
) -> None:
    """Retry the failed phase of an install, without redoing succeeded work; on an installed cluster,
    complete its last upgrade on the nodes it left behind (`bke upgrade retry`)."""
    nurl = resolve_nats(workdir, nats_url)
    wanted = [n.strip() for n in nodes.split(",") if n.strip()] if nodes else []
    doc = _status_or_exit(nurl, name, "all" if wanted else "failed")
    if doc is None:
        die(f"cluster {name!r}: not found (no install)", EXIT_INVALID)
    unknown = [n for n in wanted if n not in {x.hostname for x in doc.nodes}]
    if unknown:
        die(f"--nodes: unknown node(s) {', '.join(unknown)} in cluster {name}", EXIT_INVALID)
    upgraded: bool | None = False
    if doc.status == InstallStatus.SUCCEEDED:
        # an installed cluster's latest operation is its upgrade, if it has one: retry that (the
        # install has nothing to retry once it succeeded; an upgrade only starts after it did)
        upgraded = upgrade_exists(nurl, name)
        if upgraded:
            raise typer.Exit(retry_upgrade(nurl, name, wanted, timeout))
    if doc.status != InstallStatus.FAILED:
        unknown_upgrade = " (and no upgrader answered on bke.v1.upgrade.get about an upgrade)" if upgraded is None else ""
        die(f"cluster {name!r} is {doc.status}: nothing to retry{unknown_upgrade}", EXIT_INVALID)
    failed = [n.hostname for n in doc.nodes if n.status == NodeStatus.FAILED]

    async def send() -> int:
        nc = await connect_nats(nurl, error_cb=quiet_bus_errors)
        try:
            req = RetryInstall(request_id=str(uuid.uuid4()), cluster=name, nodes=wanted)
            await nc.jetstream().publish(RETRY_INSTALL, req.to_bytes(), headers=schema_headers())
            # the dispatcher takes the retry when it flips the install back to Running
            deadline = time.monotonic() + RETRY_PICKUP_S
            while not _picked_up(doc, await get_status(nc, name, "none")):
                if time.monotonic() > deadline:
                    error_lines([f"the retry of {name} was not picked up within {RETRY_PICKUP_S:.0f} s; is the dispatcher running?"])
                    return EXIT_FAILURE
                await asyncio.sleep(0.1)  # polling the status under a deadline: the flip sends no event
        except StatusUnavailable as exc:
            error_lines([str(exc)])
            return EXIT_FAILURE
        finally:
            await nc.close()
        if not follow:
            return 0
        return await submit_and_follow(nurl, b"", name, timeout, Console(), submit=False)

    Console(stderr=True).print(f"retrying {', '.join(wanted or failed) or 'the failed phase'} of {name}")
    raise typer.Exit(asyncio.run(send()))


def apply(
    spec: Path = typer.Argument(...),
    workdir: Optional[Path] = WORKDIR,
    nats_url: Optional[str] = NATS,
    timeout: float = typer.Option(3600.0, help="seconds to follow the install (or the changed spec's run)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="on an installed cluster: print what would change, change nothing"),
    drain_force: bool = DRAIN_FORCE,
    drain_delete_emptydir_data: bool = DRAIN_EMPTYDIR,
) -> None:
    """Install a new cluster on a running deployment and follow it; on an installed cluster,
    show what the spec changes (`--dry-run` stops there), then carry it out and follow it."""
    plan = plan_or_exit(spec)
    nurl = resolve_nats(workdir, nats_url)
    if dry_run:  # the planner alone answers: it holds the stored plans
        raise typer.Exit(show_changes(nurl, read_spec_text(spec), plan.cluster, dry_run))
    doc = _status_or_exit(nurl, plan.cluster, "none")
    if doc is not None and doc.status == InstallStatus.SUCCEEDED:
        raise typer.Exit(show_changes(nurl, read_spec_text(spec), plan.cluster, dry_run, timeout=timeout,
                                      drain=drain_options(drain_force, drain_delete_emptydir_data)))
    code = asyncio.run(submit_and_follow(nurl, read_spec_text(spec), plan.cluster, timeout, Console()))
    raise typer.Exit(code)


def show_changes(nurl: BusAccess | str, spec: bytes, cluster: str, dry_run: bool, timeout: float = 3600.0,
                 drain: DrainOptions | None = None) -> int:
    """The planner's diff, printed; without --dry-run the upgrader then carries the changes out
    (`bke.v1.cluster.apply`, apply_follow.py) and the run is followed to its end. What this
    build cannot carry out yet (joins, removals, etcd membership) it refuses by name."""
    from .changes_cmd import DiffUnavailable, print_changes, run_diff

    try:
        reply = run_diff(nurl, spec)
    except DiffUnavailable as exc:
        die(str(exc), EXIT_FAILURE)
    except (OSError, NoServersError) as exc:
        die(f"cannot reach NATS at {where(nurl)}: {exc}", EXIT_FAILURE)
    if isinstance(reply, StatusError):
        if reply.reason == "NotFound" and dry_run:
            Console().print(f"cluster {cluster} is not installed: `bke apply` without --dry-run installs it", highlight=False)
            return 0
        error_lines([f"{reply.message}"] + [f"{e.path}: {e.message}" for e in reply.errors])
        return EXIT_INVALID if reply.reason in ("Invalid", "NotFound") else EXIT_FAILURE
    print_changes(reply, Console())
    if reply.refusals:
        return EXIT_INVALID
    if dry_run or not (reply.actions or reply.versions):
        return 0
    if reply.versions and not reply.actions:
        versions = " ".join(f"--{'to' if k == 'kubernetes' else k + '-version'} {b}" for k, (_, b) in reply.versions.items())
        error_lines([f"only versions change: run `bke upgrade apply {cluster} {versions}`"])
        return EXIT_INVALID
    from .apply_follow import apply_and_follow

    try:
        return asyncio.run(apply_and_follow(nurl, spec, cluster, timeout, Console(), drain=drain))
    except (OSError, NoServersError) as exc:
        die(f"cannot reach NATS at {where(nurl)}: {exc}", EXIT_FAILURE)
        raise  # unreachable: die exits


def register(app: typer.Typer) -> None:
    app.command("status")(status)
    app.command("retry")(retry)
    app.command("apply")(apply)
