"""Submit a cluster request and follow the install: shared by `bke apply` and `bke lab install`.

Events wake the display; Redis (the install read model) is what it shows, so a follower that
starts late, or reconnects, still shows the truth.
"""
from __future__ import annotations

import time
import uuid

import nats
from redis.asyncio import Redis
from rich.console import Console
from rich.live import Live
from rich.table import Table

from bke.bus import EventWatch, put_blob
from bke.bus.streams import OBJECT_BUCKET, ensure_streams
from bke.contracts import CLUSTER_REJECTED, CLUSTER_REQUESTED, PLAN_CREATED, ClusterRequested
from bke.state.install_view import install_status

from .output import EXIT_FAILURE, EXIT_INVALID, EXIT_OK, error_lines

__all__ = ["submit_and_follow", "status_table"]

INLINE_LIMIT = 900 * 1024  # below NATS' 1 MiB max_payload, with room for the envelope


def status_table(doc: dict, elapsed: float | None = None) -> Table:
    title = f"{doc['cluster']}: {doc['status']}" + (f"  ({elapsed:.0f}s)" if elapsed is not None else "")
    t = Table("phase", "status", "nodes", "message", title=title)
    for p in doc["phases"]:
        nodes = f"{p['done']}/{p['total']}" if p["total"] else ""
        t.add_row(p["name"], p["status"], nodes, (p["message"] or "")[:100])
    return t


async def _request(nc, spec: bytes, rid: str) -> None:
    js = nc.jetstream()
    await ensure_streams(js)  # the services may still be starting; declaring is idempotent
    if len(spec) <= INLINE_LIMIT:
        req = ClusterRequested(request_id=rid, spec=spec.decode())
    else:
        ref = await put_blob(js, OBJECT_BUCKET, f"specs/{rid}.yaml", spec)
        req = ClusterRequested(request_id=rid, spec_ref=ref)
    await js.publish(CLUSTER_REQUESTED, req.to_bytes(), headers={"Nats-Msg-Id": f"request:{rid}"})


async def submit_and_follow(
    nats_url: str, redis_url: str, spec: bytes, cluster: str, timeout: float, console: Console, submit: bool = True
) -> int:
    rid = str(uuid.uuid4())
    nc = await nats.connect(nats_url)
    redis = Redis.from_url(redis_url)
    start = time.monotonic()
    try:
        async with EventWatch(nc, [CLUSTER_REJECTED, PLAN_CREATED, f"bke.v1.install.{cluster}.>"]) as watch:
            if submit:
                await _request(nc, spec, rid)
                first = await watch.wait_for(lambda e: e.data.get("requestId") == rid, timeout=120)
                if first.subject == CLUSTER_REJECTED:
                    error_lines(f"{e['path']}: {e['message']}" for e in first.data["errors"])
                    return EXIT_INVALID
            return await _follow(watch, redis, cluster, start, timeout, console)
    except TimeoutError:
        error_lines([f"no answer from the services within the deadline (cluster {cluster})"])
        return EXIT_FAILURE
    finally:
        await redis.aclose()
        await nc.close()


async def _follow(watch: EventWatch, redis: Redis, cluster: str, start: float, timeout: float, console: Console) -> int:
    deadline = start + timeout
    seen = 0
    last_lines: dict[str, str] = {}
    live = Live(console=console, auto_refresh=False) if console.is_terminal else None
    if live:
        live.start()
    try:
        while True:
            doc = await install_status(redis, cluster)
            if doc:
                if live:
                    live.update(status_table(doc, time.monotonic() - start), refresh=True)
                else:
                    for p in doc["phases"]:
                        line = f"{p['status']} {p['done']}/{p['total']}"
                        if p["status"] != "Pending" and last_lines.get(p["name"]) != line:
                            last_lines[p["name"]] = line
                            console.print(f"[{time.monotonic() - start:6.1f}s] {p['name']}: {line} {p['message'][:120]}")
                if doc["status"] == "Succeeded":
                    console.print(f"cluster {cluster} installed in {time.monotonic() - start:.1f}s")
                    return EXIT_OK
                if doc["status"] == "Failed":
                    failed = next((p for p in doc["phases"] if p["status"] == "Failed"), None)
                    where = f"phase {failed['name']}: {failed['message']}" if failed else doc["message"]
                    error_lines([f"install of {cluster} failed: {where}"])
                    return EXIT_FAILURE
            if time.monotonic() > deadline:
                error_lines([f"install of {cluster} not finished after {timeout:.0f}s; `bke status {cluster}` shows where it is"])
                return EXIT_FAILURE
            # wake on the next event, or re-read once a second
            await watch.wait_more(seen, timeout=1.0)
            seen = len(watch.seen)
    finally:
        if live:
            live.stop()
