"""A service SIGKILLed while it holds messages: another start of it takes them up within
seconds, not after a 60 s ack wait.

The dispatcher (its own process) holds the etcd results (Redis is away, so its handler cannot
finish), is killed, Redis comes back and the dispatcher is started again: the results come back
to it once the short ack wait (10 s) of the last in-progress ack runs out, and the install
finishes. Before, the consumers' ack wait was 60 s.
"""
from __future__ import annotations

import asyncio
import time

import pytest
from redis.asyncio import Redis

from bke.adapters.bus import EventWatch
from bke.adapters.bus.streams import ensure_streams

from .helpers import (DispatcherProcess, _announce, _ids, _stored_cluster, ack_pending, connect, eventually, gated_fleet,
                      health_of, restart_redis, stop_redis)

pytestmark = [pytest.mark.integration, pytest.mark.faults]

RETAKEN_WITHIN_S = 30.0  # ack wait 10 s + a restart + the rest of the install; the old ack wait alone was 60 s


async def test_work_held_by_a_killed_dispatcher_is_taken_up_within_seconds_of_its_restart(own_runtime, tmp_path, operator_box):
    info = own_runtime.info
    nc = await connect(info.nats_url)
    js = nc.jetstream()
    await ensure_streams(js)
    r = Redis.from_url(info.redis_url)
    plan, digest = await _stored_cluster(r, "killed")
    first = DispatcherProcess(info.nats_url, info.redis_url, tmp_path / "dispatcher-1.log")
    second = DispatcherProcess(info.nats_url, info.redis_url, tmp_path / "dispatcher-2.log")
    gate, waiting = asyncio.Event(), []
    fleet = await gated_fleet(nc, info.nats_url, "killed", plan, "health:etcd", gate, waiting, r, operator_box)
    await r.aclose()
    etcd_nodes = [n.hostname for n in plan.nodes if "etcd-data" in n.components]
    try:
        first.start()

        async def answers():
            return await health_of(nc, "dispatcher")
        await eventually(answers, 60, "the dispatcher process answers on its health subject")
        async with EventWatch(nc, ["bke.v1.install.killed.finished", "bke.v1.deadletter.>"]) as watch:
            await fleet.start()
            await _announce(js, "killed", digest, [n.hostname for n in plan.nodes], _ids(fleet))

            async def all_etcd_waiting():
                return len(waiting) == len(etcd_nodes)
            await eventually(all_etcd_waiting, 60, "every etcd node runs its etcd command")
            port = stop_redis(own_runtime)
            gate.set()

            async def held():
                # at least one result fetched and held; the consumer fetches no more while it
                # holds (the rest wait in the stream, uncounted)
                acked, pending = await ack_pending(nc, "dispatcher-results")
                return acked >= 1 and acked + pending >= len(etcd_nodes)
            await eventually(held, 30, "the dispatcher holds the etcd results")

            first.kill()  # mid-handler: the results are neither acked nor nacked
            killed_at = time.monotonic()
            restart_redis(own_runtime, port)
            second.start()
            done = await watch.wait_for(lambda e: e.subject.endswith(".finished"), timeout=90)
            took = time.monotonic() - killed_at
            print(f"\ninstall finished {took:.1f} s after the dispatcher was killed holding {len(etcd_nodes)} results")
            assert done.data["status"] == "Succeeded", done.data
            assert took < RETAKEN_WITHIN_S
            assert [e for e in watch.seen if e.subject.startswith("bke.v1.deadletter")] == []
        assert fleet.executed == 19 and fleet.replayed == 0  # no completed command ran twice
    finally:
        gate.set()
        await fleet.stop(grace=1.0)
        first.stop()
        second.stop()
        await nc.close()
