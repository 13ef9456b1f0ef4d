"""Submit a cluster request and follow the install: shared by `bke apply`, `bke retry` and
`bke lab install`.

Phase events wake the display; the dispatcher's status reply (`bke.v1.status.get`) is what it
shows, so a follower that starts late, or reconnects, still shows the truth.
"""
from __future__ import annotations

import time
import uuid

from nats.errors import NoServersError

from bke.contracts.base import schema_headers
from bke.adapters.bus.connect import BusAccess, connect_nats
from rich.console import Console
from rich.live import Live
from rich.table import Table

from bke.adapters.bus import EventWatch
from bke.adapters.bus.streams import require_streams
from bke.contracts import CLUSTER_REJECTED, INSTALL_CLUSTER, PLAN_CREATED, InstallCluster
from bke.contracts.install import install_subject
from bke.contracts.status import ClusterStatus
from bke.core.errors import is_unavailable

from .output import EXIT_FAILURE, EXIT_INVALID, EXIT_OK, error_lines, quiet_bus_errors, warn_lines, where
from bke.adapters.state.epoch import STATE_LOST
from .spec_source import blob_put, spec_fields
from .status_client import StatusUnavailable, get_status

__all__ = ["failure_lines", "failure_code", "submit_and_follow", "status_table"]


def status_table(doc: ClusterStatus, elapsed: float | None = None) -> Table:
    title = f"{doc.cluster}: {doc.status}" + (f"  ({elapsed:.0f}s)" if elapsed is not None else "")
    t = Table("phase", "status", "nodes", "message", title=title)
    for p in doc.phases:
        t.add_row(p.name, p.status, f"{p.done}/{p.total}" if p.total else "", (p.message or "")[:100])
    return t


def failure_lines(doc: ClusterStatus) -> list[str]:
    """Why an install failed: the phase, the failed nodes, the reason."""
    phase = next((p for p in doc.phases if p.status == "Failed"), None)
    where = f" in phase {phase.name}" if phase else ""
    lines = [f"install of {doc.cluster} failed{where}: {doc.message or (phase.message if phase else '')}"]
    shown = [n.hostname for n in doc.nodes if n.status == "Failed"][:10]
    if shown:
        rest = doc.node_counts.failed - len(shown)
        lines.append(f"failed node(s): {', '.join(shown)}" + (f" and {rest} more" if rest > 0 else ""))
    if doc.kind == "invalid":
        lines.append("the input was refused: fix the spec")
    else:
        lines.append(f"after fixing the cause, `bke retry {doc.cluster}` resumes the failed phase")
    return lines


def failure_code(doc: ClusterStatus) -> int:
    """2 when the input was refused, 1 for an operational failure (see output.py)."""
    return EXIT_INVALID if doc.kind == "invalid" else EXIT_FAILURE


async def _request(nc, spec: bytes, rid: str) -> None:
    js = nc.jetstream()
    await require_streams(js)  # declared at deploy time; a clear error if not
    req = InstallCluster(request_id=rid, **await spec_fields(spec, blob_put(js, f"specs/{rid}.yaml")))
    await js.publish(INSTALL_CLUSTER, req.to_bytes(), headers=schema_headers({"Nats-Msg-Id": f"request:{rid}"}))


async def submit_and_follow(nats_url: BusAccess | str, spec: bytes, cluster: str, timeout: float, console: Console, submit: bool = True) -> int:
    rid = str(uuid.uuid4())
    try:
        nc = await connect_nats(nats_url, error_cb=quiet_bus_errors)
    except (OSError, NoServersError) as exc:
        error_lines([f"cannot reach NATS at {where(nats_url)}: {exc}"])
        return EXIT_FAILURE
    start = time.monotonic()
    # phase changes and the end wake the display; per-node events are too many to poll on
    subjects = [CLUSTER_REJECTED, PLAN_CREATED, install_subject(cluster, "phase"), install_subject(cluster, "finished")]
    try:
        async with EventWatch(nc, subjects) as watch:
            if submit:
                await _request(nc, spec, rid)
                first = await watch.wait_for(lambda e: e.data.get("requestId") == rid, timeout=120)
                if first.subject == CLUSTER_REJECTED:
                    error_lines(f"{e['path']}: {e['message']}" for e in first.data["errors"])
                    return EXIT_INVALID
            return await _follow(watch, nc, cluster, start, timeout, console)
    except TimeoutError:
        error_lines([f"no answer from the services within the deadline (cluster {cluster})"])
        return EXIT_FAILURE
    finally:
        await nc.close()


async def _follow(watch: EventWatch, nc, cluster: str, start: float, timeout: float, console: Console) -> int:
    deadline = start + timeout
    seen = 0
    last_lines: dict[str, str] = {}
    waiting = False  # said once per outage that we wait, not once a second
    live = Live(console=console, auto_refresh=False) if console.is_terminal else None
    if live:
        live.start()
    try:
        while True:
            try:
                doc = await get_status(nc, cluster, nodes="none")
            except StatusUnavailable as exc:
                if STATE_LOST in str(exc):  # not an outage: nothing goes on until a restore
                    error_lines([str(exc)])
                    return EXIT_FAILURE
                doc = None  # a dispatcher restarting, its store away, or not up yet: keep following to the deadline
                if not waiting:
                    warn_lines([f"{exc}; waiting (up to {max(0.0, deadline - time.monotonic()):.0f} s more)"])
                    waiting = True
            except Exception as exc:  # noqa: BLE001 - NATS away mid-follow: the connection reconnects by itself
                if not is_unavailable(exc):
                    raise
                doc = None
                if not waiting:
                    warn_lines([f"NATS unavailable ({type(exc).__name__}); waiting for it to come back"])
                    waiting = True
            if doc:
                if waiting:
                    console.print("the services answer again; following")
                    waiting = False
                if live:
                    live.update(status_table(doc, time.monotonic() - start), refresh=True)
                else:
                    for p in doc.phases:
                        line = f"{p.status} {p.done}/{p.total}"
                        if p.status != "Pending" and last_lines.get(p.name) != line:
                            last_lines[p.name] = line
                            console.print(f"[{time.monotonic() - start:6.1f}s] {p.name}: {line} {p.message[:120]}")
                if doc.status == "Succeeded":
                    console.print(f"cluster {cluster} installed in {time.monotonic() - start:.1f}s")
                    return EXIT_OK
                if doc.status == "Failed":
                    try:  # the first page of failed nodes, to name them
                        doc = await get_status(nc, cluster, nodes="failed", every_page=False) or doc
                    except StatusUnavailable:
                        pass  # the reason and the phase are in `doc` already
                    error_lines(failure_lines(doc))
                    return failure_code(doc)
            if time.monotonic() > deadline:
                error_lines([f"install of {cluster} not finished after {timeout:.0f}s; `bke status {cluster}` shows where it is"])
                return EXIT_FAILURE
            # wake on the next phase event, or re-read once a second (done counts move between events)
            await watch.wait_more(seen, timeout=1.0)
            seen = len(watch.seen)
    finally:
        if live:
            live.stop()
