"""Submit a cluster request and follow the install: shared by `bke apply`, `bke retry` and
`bke lab install`.

Phase events wake the display; the dispatcher's status reply (`bke.v1.status.get`) is what it
shows, so a follower that starts late, or reconnects, still shows the truth: the install is the
one operation whose view is not on its events, so it polls (`Follow.poll`) in follow.py's loop.
"""
from __future__ import annotations

import time
import uuid
from functools import partial
from typing import Any

from nats.aio.client import Client as NatsClient
from nats.errors import NoServersError
from rich.console import Console
from rich.live import Live
from rich.table import Table

from bke.adapters.bus.connect import BusAccess, connect_nats
from bke.adapters.state.epoch import STATE_LOST
from bke.contracts import CLUSTER_REJECTED, INSTALL_CLUSTER, PLAN_CREATED, InstallCluster
from bke.contracts.install import install_subject
from bke.contracts.status import ClusterStatus
from bke.contracts.statuses import InstallStatus, NodeStatus, PhaseStatus
from bke.core.errors import is_unavailable

from .follow import Follow, Progress, exit_with, follow_on, goes_on, publish, refused
from .output import EXIT_FAILURE, EXIT_INVALID, EXIT_OK, error_lines, quiet_bus_errors, warn_lines, where
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
    phase = next((p for p in doc.phases if p.status == PhaseStatus.FAILED), None)
    where = f" in phase {phase.name}" if phase else ""
    lines = [f"install of {doc.cluster} failed{where}: {doc.message or (phase.message if phase else '')}"]
    shown = [n.hostname for n in doc.nodes if n.status == NodeStatus.FAILED][:10]
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


async def _request(nc: NatsClient, spec: bytes, rid: str) -> None:
    # a spec too large for one message is stored first, on the same connection
    req = InstallCluster(request_id=rid, **await spec_fields(spec, blob_put(nc.jetstream(), f"specs/{rid}.yaml")))
    await publish(INSTALL_CLUSTER, req.to_bytes(), f"request:{rid}")(nc)


def _errors(doc: dict[str, Any]) -> list[str]:
    return [f"{e['path']}: {e['message']}" for e in doc["errors"]]


async def submit_and_follow(nats_url: BusAccess | str, spec: bytes, cluster: str, timeout: float, console: Console, submit: bool = True) -> int:
    rid = str(uuid.uuid4())
    shown = _Display(cluster, timeout, console)
    try:
        nc = await connect_nats(nats_url, error_cb=quiet_bus_errors)
    except (OSError, NoServersError) as exc:
        error_lines([f"cannot reach NATS at {where(nats_url)}: {exc}"])
        return EXIT_FAILURE
    # phase changes and the end wake the display; per-node events are too many to poll on
    wakes = [PLAN_CREATED, install_subject(cluster, "phase"), install_subject(cluster, "finished")]
    op = Follow(request_id=rid, send=partial(_request, spec=spec, rid=rid) if submit else None,
                answers={CLUSTER_REJECTED: refused(_errors), **dict.fromkeys(wakes, goes_on)}, answer_within=120.0,
                gave_up=shown.gave_up, poll=shown.poll)
    try:
        return await follow_on(nc, op, timeout - (time.monotonic() - shown.start))
    except TimeoutError:
        error_lines([f"no answer from the services within the deadline (cluster {cluster})"])
        return EXIT_FAILURE
    finally:
        shown.close()
        await nc.close()


class _Display:
    """The install as the dispatcher tells it (`bke.v1.status.get`), read again at every wake:
    a live table on a terminal, else a line per phase that changed."""

    def __init__(self, cluster: str, timeout: float, console: Console):
        self.cluster, self.timeout, self.console = cluster, timeout, console
        self.start = time.monotonic()
        self.waiting = False  # said once per outage that we wait, not once a second
        self.last_lines: dict[str, str] = {}
        self.live: Live | None = None

    async def poll(self, nc: NatsClient) -> int | None:
        try:
            doc = await get_status(nc, self.cluster, nodes="none")
        except StatusUnavailable as exc:
            if STATE_LOST in str(exc):  # not an outage: nothing goes on until a restore
                return exit_with(EXIT_FAILURE, [str(exc)])
            # a dispatcher restarting, its store away, or not up yet: keep following to the deadline
            left = max(0.0, self.start + self.timeout - time.monotonic())
            return self._wait(f"{exc}; waiting (up to {left:.0f} s more)")
        except Exception as exc:  # noqa: BLE001 - NATS away mid-follow: the connection reconnects by itself
            if not is_unavailable(exc):
                raise
            return self._wait(f"NATS unavailable ({type(exc).__name__}); waiting for it to come back")
        if doc is None:
            return None
        if self.waiting:
            self.console.print("the services answer again; following")
            self.waiting = False
        self._show(doc)
        if doc.status == InstallStatus.SUCCEEDED:
            self.console.print(f"cluster {self.cluster} installed in {time.monotonic() - self.start:.1f}s")
            return EXIT_OK
        if doc.status == InstallStatus.FAILED:
            try:  # the first page of failed nodes, to name them
                doc = await get_status(nc, self.cluster, nodes="failed", every_page=False) or doc
            except StatusUnavailable:
                pass  # the reason and the phase are in `doc` already
            return exit_with(failure_code(doc), failure_lines(doc))
        return None

    def _wait(self, why: str) -> None:
        if not self.waiting:
            warn_lines([why])
            self.waiting = True

    def _show(self, doc: ClusterStatus) -> None:
        elapsed = time.monotonic() - self.start
        if self.console.is_terminal:
            if self.live is None:
                self.live = Live(console=self.console, auto_refresh=False)
                self.live.start()
            self.live.update(status_table(doc, elapsed), refresh=True)
            return
        for p in doc.phases:
            line = f"{p.status} {p.done}/{p.total}"
            if p.status != PhaseStatus.PENDING and self.last_lines.get(p.name) != line:
                self.last_lines[p.name] = line
                self.console.print(f"[{elapsed:6.1f}s] {p.name}: {line} {p.message[:120]}")

    def gave_up(self, seen: Progress) -> int:
        return exit_with(EXIT_FAILURE, [f"install of {self.cluster} not finished after {self.timeout:.0f}s; "
                                        f"`bke status {self.cluster}` shows where it is"])

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()
