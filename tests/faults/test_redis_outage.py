"""Redis stopped for longer than every retry of the old delivery rule, then started again on the
same port and AOF.

Before: nine etcd results were dead-lettered after five deliveries (0.5 + 1 + 2 + 4 s of
backoff) although the commands had run, and the install sat at `etcd 0/9` for good. Now the
results are held (in-progress acks, nothing counted), the dispatcher says it is not ready, the
CLI says so in one ERROR line, and the install finishes once Redis is back.
"""
from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import pytest
from redis.asyncio import Redis

from bke.adapters.bus import EventWatch
from bke.adapters.bus.streams import ensure_streams
from bke_dispatcher.app import create_service
from bke_dispatcher.settings import DispatcherSettings

from .helpers import _announce, _ids, _stored_cluster, ack_pending, connect, eventually, gated_fleet, health_of, restart_redis, stop_redis

pytestmark = [pytest.mark.integration, pytest.mark.faults]

# short: longer than max_deliver (5) deliveries with the old backoff (0.5 + 1 + 2 + 4 = 7.5 s);
# long (a soak): longer than a minute, many times the consumers' 10 s ack wait
OUTAGES = [pytest.param(12.0, id="short"), pytest.param(75.0, id="long", marks=pytest.mark.soak)]


@pytest.mark.parametrize("outage_s", OUTAGES)
async def test_results_held_through_a_redis_outage_are_counted_and_the_install_finishes(own_runtime, operator_box,
                                                                                      outage_s):
    info = own_runtime.info
    nc = await connect(info.nats_url)
    js = nc.jetstream()
    await ensure_streams(js)
    r = Redis.from_url(info.redis_url)
    plan, digest = await _stored_cluster(r, "outage")
    svc = create_service(DispatcherSettings(nats_url=info.nats_url, redis_url=info.redis_url, owner="o", mode="lab",
                                            health_interval_s=0))
    await svc.start()
    gate, waiting = asyncio.Event(), []
    fleet = await gated_fleet(nc, info.nats_url, "outage", plan, "health:etcd", gate, waiting, r, operator_box)
    await r.aclose()
    etcd_nodes = [n.hostname for n in plan.nodes if "etcd-data" in n.components]
    try:
        async with EventWatch(nc, ["bke.v1.install.outage.finished", "bke.v1.deadletter.>"]) as watch:
            await fleet.start()
            await _announce(js, "outage", digest, [n.hostname for n in plan.nodes], _ids(fleet))

            async def all_etcd_waiting():
                return len(waiting) == len(etcd_nodes)
            await eventually(all_etcd_waiting, 60, "every etcd node runs its etcd command")
            port = stop_redis(own_runtime)
            down_at = time.monotonic()
            gate.set()  # the etcd results reach the bus while Redis is away

            async def held():
                # at least one result fetched and held; the consumer fetches no more while it
                # holds (the rest wait in the stream, uncounted)
                acked, pending = await ack_pending(nc, "dispatcher-results")
                return acked >= 1 and acked + pending >= len(etcd_nodes)
            await eventually(held, 30, "the dispatcher holds the etcd results")

            async def not_ready():
                h = await health_of(nc, "dispatcher")
                return h if h is not None and not h.ready and not h.conditions.get("redis", True) else None
            h = await eventually(not_ready, 15, "the dispatcher reports Redis unreachable")
            assert any(reason.startswith("redis unreachable") for reason in h.reasons)

            # the CLI, while the dispatcher cannot read its store: one ERROR line, exit 1
            cli = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "bke_cli.main", "status", "outage",
                                                          "--nats", info.nats_url], capture_output=True, text=True, timeout=60)
            assert cli.returncode == 1, cli.stderr
            lines = cli.stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("ERROR ") and "store unavailable" in lines[0], cli.stderr
            assert "Traceback" not in cli.stderr

            # the outage lasts longer than every retry of the old rule (the fault, not a wait for an event)
            await asyncio.sleep(max(0.0, outage_s - (time.monotonic() - down_at)))
            assert (await ack_pending(nc, "dispatcher-results"))[0] >= 1  # still held, not settled
            restart_redis(own_runtime, port)

            done = await watch.wait_for(lambda e: e.subject.endswith(".finished"), timeout=90)
            assert done.data["status"] == "Succeeded", done.data
            assert [e for e in watch.seen if e.subject.startswith("bke.v1.deadletter")] == []

            async def ready_again():
                h = await health_of(nc, "dispatcher")
                return h is not None and h.ready
            await eventually(ready_again, 15, "the dispatcher is ready again")
        # node-env x4, certs x4, etcd x3, init x1, join x2, workers x1, health x3: each ran once
        assert fleet.executed == 19 and fleet.replayed == 0
    finally:
        gate.set()
        await fleet.stop(grace=1.0)
        await svc.stop()
        await nc.close()
