"""`bke etcd restore` over the bus: ask what the restore would stop, then run it and follow it.

    RestoreEtcd(dryRun) -> upgrader: EtcdRestoreAccepted (what stops, every stage) | EtcdRestoreRejected
    RestoreEtcd         -> upgrader: EtcdRestoreAccepted, then EtcdRestoreChanged ... until Succeeded or Failed

Only NATS is needed: every answer is an event (the whole view rides on each change).
Exit codes: 0 restored, 2 refused (the reason is printed), 1 failed or no answer in time.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bke.adapters.bus.connect import BusAccess
from bke.contracts.restore import RESTORE_ACCEPTED, RESTORE_ETCD, RESTORE_REJECTED, RestoreEtcd, restore_subject
from bke.contracts.statuses import NodeStatus

from .follow import Follow, Progress, Views, ended, exit_with, follow, publish, refused
from .output import EXIT_FAILURE, EXIT_OK

__all__ = ["accepted_lines", "progress_line", "restore_and_follow"]


def accepted_lines(doc: dict[str, Any]) -> list[str]:
    """What a person reads before confirming: every pod that stops, then every stage."""
    out = [f"Restoring {doc['etcdCluster']} of {doc['cluster']} from snapshot {doc['snapshotId']} "
           f"(revision {doc.get('revision', 0)}, taken {doc.get('takenAt', '?')}) stops:"]
    out += [f"  {line}" for line in doc.get("stops") or []]
    out.append(f"then restores every member as a new cluster (token {doc['token']}) and starts what it stopped:")
    for i, s in enumerate(doc.get("stages") or [], 1):
        nodes = f" [{', '.join(s['nodes'])}]" if s.get("nodes") else " [the upgrader]"
        out.append(f"  {i}. {s['name']}{nodes}: {s['summary']}")
    return out


def progress_line(view: dict[str, Any]) -> str:
    stages = view.get("stages") or []
    done = sum(1 for s in stages if s["status"] == NodeStatus.SUCCEEDED)
    now = next((s for s in stages if s["name"] == view.get("stage")), None)
    where = f", {now['name']} {now['done']}/{len(now['nodes'])} nodes" if now is not None and now["nodes"] else (
        f", {now['name']}" if now is not None else "")
    return f"etcd restore {view['status']}: stage {done}/{len(stages)}{where}"


async def restore_and_follow(access: BusAccess, req: RestoreEtcd, timeout: float, echo: Callable[[str], None]) -> int:
    """Send `req` and follow it; with `dry_run`, print what it would stop and do, and return."""
    cluster = req.cluster

    def accepted(doc: dict[str, Any]) -> int | None:
        if not req.dry_run:
            return None  # the changed views follow
        for line in accepted_lines(doc):
            echo(line)
        return EXIT_OK

    def gave_up(seen: Progress) -> int:
        what = "the restore did not finish" if seen.answered else "no answer from the upgrader"
        return exit_with(EXIT_FAILURE, [f"{what} within {timeout:.0f}s (cluster {cluster}, request {req.request_id})"])

    def failed(view: dict[str, Any]) -> list[str]:
        return [f"etcd restore of {cluster} failed: {view.get('message')}",
                "what it stopped stays stopped (old data dirs are kept aside); the same command runs it again after a fix"]

    return await follow(access, Follow(
        request_id=req.request_id, gave_up=gave_up, answers={
            RESTORE_REJECTED: refused(lambda doc: [f"etcd restore of {cluster} refused: {doc.get('message')}"]),
            RESTORE_ACCEPTED: accepted},
        send=publish(RESTORE_ETCD, req.to_bytes(), f"etcd-restore:{cluster}:{req.request_id}"),
        views=Views(restore_subject(cluster), "restore", progress_line, echo, end=ended(failed))), timeout, name="bke-cli")
