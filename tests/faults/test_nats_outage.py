"""NATS stopped and started again on the same port and store, for a short outage and for one
longer than nats-py's default 60 reconnect attempts (with that default the services gave
up after 60 attempts and stayed alive and silent; the install sat at `etcd 0/9`).

The dispatcher reconnects, reports itself ready again, and the install goes on and finishes.
The long variant is a soak: its outage is the point, over a minute (`python3 dev.py soak`).
"""
from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis

from bke.adapters.bus import EventWatch
from bke.adapters.bus.streams import ensure_streams
from bke.adapters.runtime.processes import stop_pid
from bke_dispatcher.app import create_service
from bke_dispatcher.settings import DispatcherSettings

from .helpers import _announce, _ids, _stored_cluster, connect, eventually, gated_fleet, health_of

pytestmark = [pytest.mark.integration, pytest.mark.faults]


@pytest.mark.parametrize("outage_s", [pytest.param(5.0, id="short"),
                                      pytest.param(70.0, id="longer-than-60-reconnects", marks=pytest.mark.soak)])
async def test_after_a_nats_outage_the_dispatcher_goes_on_and_the_install_finishes(own_runtime, outage_s, operator_box):
    info = own_runtime.info
    nc = await connect(info.nats_url)
    js = nc.jetstream()
    await ensure_streams(js)
    r = Redis.from_url(info.redis_url)
    plan, digest = await _stored_cluster(r, "natsout")
    svc = create_service(DispatcherSettings(nats_url=info.nats_url, redis_url=info.redis_url, owner="o", mode="lab",
                                            health_interval_s=0))
    await svc.start()
    gate, waiting = asyncio.Event(), []
    fleet = await gated_fleet(nc, info.nats_url, "natsout", plan, "health:etcd", gate, waiting, r, operator_box)
    await r.aclose()
    etcd_nodes = [n.hostname for n in plan.nodes if "etcd-data" in n.components]
    try:
        await fleet.start()
        await _announce(js, "natsout", digest, [n.hostname for n in plan.nodes], _ids(fleet))

        async def all_etcd_waiting():
            return len(waiting) == len(etcd_nodes)
        await eventually(all_etcd_waiting, 60, "every etcd node runs its etcd command")
        stop_pid(info.nats_pid)

        async def dispatcher_sees_it():
            return not svc.readiness.ok("nats")
        await eventually(dispatcher_sees_it, 15, "the dispatcher reports NATS disconnected")
        # the outage itself: the fault's length, not a wait for an event
        await asyncio.sleep(outage_s)
        back = own_runtime.ensure_started()
        assert back.nats_url == info.nats_url  # same port, same store

        async def ready_again():
            h = await health_of(nc, "dispatcher")
            return h is not None and h.ready
        await eventually(ready_again, 30, "the dispatcher reconnects and is ready")
        async with EventWatch(nc, ["bke.v1.install.natsout.finished", "bke.v1.deadletter.>"]) as watch:
            gate.set()  # the etcd results go out now
            done = await watch.wait_for(lambda e: e.subject.endswith(".finished"), timeout=120)
            assert done.data["status"] == "Succeeded", done.data
            assert [e for e in watch.seen if e.subject.startswith("bke.v1.deadletter")] == []
    finally:
        gate.set()
        await fleet.stop(grace=1.0)
        await svc.stop()
        await nc.close()
