"""`bke etcd restore` over the bus: ask what the restore would stop, then run it and follow it.

    RestoreEtcd(dryRun) -> upgrader: EtcdRestoreAccepted (what stops, every stage) | EtcdRestoreRejected
    RestoreEtcd         -> upgrader: EtcdRestoreAccepted, then EtcdRestoreChanged ... until Succeeded or Failed

Only NATS is needed: every answer is an event (the whole view rides on each change).
Exit codes: 0 restored, 2 refused (the reason is printed), 1 failed or no answer in time.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from bke.adapters.bus import EventWatch
from bke.adapters.bus.connect import BusAccess, connect_nats
from bke.adapters.bus.streams import require_streams
from bke.contracts.restore import RESTORE_ACCEPTED, RESTORE_ETCD, RESTORE_REJECTED, RestoreEtcd, restore_subject

from .output import EXIT_FAILURE, EXIT_INVALID, EXIT_OK, error_lines

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
    done = sum(1 for s in stages if s["status"] == "Succeeded")
    now = next((s for s in stages if s["name"] == view.get("stage")), None)
    where = f", {now['name']} {now['done']}/{len(now['nodes'])} nodes" if now is not None and now["nodes"] else (
        f", {now['name']}" if now is not None else "")
    return f"etcd restore {view['status']}: stage {done}/{len(stages)}{where}"


async def restore_and_follow(access: BusAccess, req: RestoreEtcd, timeout: float, echo: Callable[[str], None]) -> int:
    """Send `req` and follow it; with `dry_run`, print what it would stop and do, and return."""
    deadline = time.monotonic() + timeout
    cluster = req.cluster
    nc = await connect_nats(access, name="bke-cli")
    try:
        async with EventWatch(nc, [RESTORE_ACCEPTED, RESTORE_REJECTED, restore_subject(cluster)]) as watch:
            js = nc.jetstream()
            await require_streams(js)
            await js.publish(RESTORE_ETCD, req.to_bytes(), headers={"Nats-Msg-Id": f"etcd-restore:{cluster}:{req.request_id}"})
            seen, accepted, last = 0, False, ""
            while time.monotonic() < deadline:
                for e in watch.seen[seen:]:
                    if e.data.get("requestId") == req.request_id and e.subject == RESTORE_REJECTED:
                        error_lines([f"etcd restore of {cluster} refused: {e.data.get('message')}"])
                        return EXIT_INVALID
                    if e.data.get("requestId") == req.request_id and e.subject == RESTORE_ACCEPTED:
                        if req.dry_run:
                            for line in accepted_lines(e.data):
                                echo(line)
                            return EXIT_OK
                        accepted = True
                    view = e.data.get("restore") or {}
                    if e.subject == restore_subject(cluster) and view.get("requestId") == req.request_id:
                        line = progress_line(view)
                        if line != last:
                            echo(line)
                            last = line
                        if view["status"] == "Succeeded":
                            return EXIT_OK
                        if view["status"] == "Failed":
                            error_lines([f"etcd restore of {cluster} failed: {view.get('message')}",
                                         "what it stopped stays stopped (old data dirs are kept aside); "
                                         "the same command runs it again after a fix"])
                            return EXIT_FAILURE
                seen = len(watch.seen)
                await watch.wait_more(seen, timeout=max(0.1, min(1.0, deadline - time.monotonic())))
            what = "the restore did not finish" if accepted else "no answer from the upgrader"
            error_lines([f"{what} within {timeout:.0f}s (cluster {cluster}, request {req.request_id})"])
            return EXIT_FAILURE
    finally:
        await nc.close()
