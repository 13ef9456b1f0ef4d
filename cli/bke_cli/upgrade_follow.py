"""`bke upgrade apply` / `bke lab upgrade`: send the request, then follow the upgrade (`bke apply`
follows a changed spec's run the same way: `send_and_follow`; the loop is follow.py's).

    UpgradeCluster -> upgrader: UpgradeAccepted (or UpgradeRejected: every reason)
                      -> UpgradeChanged ... until Succeeded or Failed

Only NATS is needed: every answer is an event (the whole view rides on each UpgradeChanged).
With `dry_run` the accepted plan is the answer and nothing starts (`bke upgrade plan --nats`).
Exit codes: 0 upgraded (or, dry run, it would be accepted), 2 refused (the reasons are
printed), 1 failed (a node rolled back, say) or no answer before the deadline.
"""
from __future__ import annotations

import uuid
from functools import partial
from typing import Any, Callable

from rich.console import Console

from bke.adapters.bus.connect import BusAccess
from bke.contracts.statuses import RunStatus
from bke.contracts.upgrade import (
    RETRY_UPGRADE,
    UPGRADE_ACCEPTED,
    UPGRADE_CLUSTER,
    UPGRADE_REJECTED,
    RetryUpgrade,
    UpgradeCluster,
    upgrade_subject,
)

from .follow import Follow, Progress, Views, ended, exit_with, follow, publish, refused
from .output import EXIT_FAILURE, EXIT_OK

__all__ = ["progress_line", "send_and_follow", "upgrade_and_follow"]


def progress_line(view: dict[str, Any], what: str = "upgrade") -> str:
    steps = view.get("steps") or []
    now = next((s for s in steps if s["name"] == view.get("step") and s["status"] in (RunStatus.RUNNING, RunStatus.PENDING, RunStatus.FAILED)), None)
    done = sum(1 for s in steps if s["status"] in (RunStatus.SUCCEEDED, RunStatus.SKIPPED))
    where = ""
    if now is not None:
        group = f"/{now['group']}" if now.get("group") else ""
        where = f", {now['name']}{group} {now['done']}/{now['total']} nodes"
    return f"{what} {view['status']}: step {done}/{len(steps)}{where}"


def _accepted_lines(doc: dict[str, Any]) -> list[str]:
    cur, tgt = doc["current"], doc["target"]
    out = [f"{doc['cluster']}: kubernetes {cur['kubernetes']} -> {tgt['kubernetes']}, etcd {cur['etcd']} -> "
           f"{tgt['etcd']}, containerd {cur['containerd']} -> {tgt['containerd']}"]
    for s in doc.get("steps") or []:
        group = f"/{s['group']}" if s.get("group") else ""
        out.append(f"  {s['name']}{group}: {s['total']} node(s) in {s['batches']} batch(es)" if s["batches"] else f"  {s['name']}")
    for f in doc.get("findings") or []:
        out.append(f"  [{f['name']}] {f['kind']}{' (ignored)' if f.get('ignored') else ''}: {f['message']}")
    if doc.get("leftOut"):
        out.append(f"  left out: {', '.join(doc['leftOut'][:10])} (upgraded later)")
    if doc.get("retryOf"):
        nodes = doc.get("nodes") or []
        more = f" and {len(nodes) - 10} more" if len(nodes) > 10 else ""
        out.append(f"  completes upgrade {doc['retryOf']} on {', '.join(nodes[:10])}{more}")
    return out


async def upgrade_and_follow(nats_url: BusAccess | str, req: UpgradeCluster | RetryUpgrade, timeout: float,
                             console: Console) -> int:
    """Send an upgrade (or, a RetryUpgrade, its retry on nodes left behind) and follow it."""
    rid = req.request_id or str(uuid.uuid4())
    subject = RETRY_UPGRADE if isinstance(req, RetryUpgrade) else UPGRADE_CLUSTER
    dry = isinstance(req, UpgradeCluster) and req.dry_run
    return await send_and_follow(
        nats_url, subject, req.to_bytes(), f"upgrade:{req.cluster}:{rid}", req.cluster, rid, timeout, console,
        accepted=UPGRADE_ACCEPTED, rejected=UPGRADE_REJECTED, what="upgrade", accepted_lines=_accepted_lines,
        rejected_lines=lambda d: [f"upgrade of {req.cluster} refused: {d.get('message')}"], ends_at_accept=lambda d: dry)


async def send_and_follow(nats_url: BusAccess | str, subject: str, payload: bytes, msg_id: str, cluster: str, rid: str,
                          timeout: float, console: Console, *, accepted: str, rejected: str, what: str,
                          accepted_lines: Callable[[dict[str, Any]], list[str]],
                          rejected_lines: Callable[[dict[str, Any]], list[str]],
                          ends_at_accept: Callable[[dict[str, Any]], bool]) -> int:
    """Send a request the upgrader answers on `accepted` / `rejected` and follow its run on the
    upgrade's changed subject (an upgrade, a retry, a changed spec: `bke apply`) to its end."""

    def say(line: str) -> None:
        console.print(line, markup=False, highlight=False)

    def on_accepted(doc: dict[str, Any]) -> int | None:
        for line in accepted_lines(doc):
            say(line)
        return EXIT_OK if ends_at_accept(doc) else None

    def gave_up(seen: Progress) -> int:
        gist = f"the {what} did not finish" if seen.answered else "no answer from the upgrader"
        return exit_with(EXIT_FAILURE, [f"{gist} within {timeout:.0f}s (cluster {cluster}, request {rid}); "
                                        f"`bke upgrade status {cluster}` shows where it is"])

    return await follow(nats_url, Follow(
        request_id=rid, send=publish(subject, payload, msg_id), gave_up=gave_up,
        answers={rejected: refused(rejected_lines), accepted: on_accepted},
        views=Views(upgrade_subject(cluster), "upgrade", partial(progress_line, what=what), say,
                    end=ended(lambda view: [f"{what} of {cluster} failed: {view.get('message')}"]))), timeout)
