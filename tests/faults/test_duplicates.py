"""Duplicated and reordered messages: every agent result of an install is
published again, in batches sent in reverse order, and the install request itself twice. The
install finishes once, every command ran once, and each node's record is the first answer's."""
from __future__ import annotations

import pytest
from redis.asyncio import Redis

from bke.adapters.bus import EventWatch
from bke.adapters.bus.streams import ensure_streams
from bke_dispatcher.app import create_service
from bke_dispatcher.settings import DispatcherSettings
from bke_dispatcher.state import DispatcherState

from .helpers import _announce, _ids, _null_fleet, _stored_cluster, connect

pytestmark = [pytest.mark.integration, pytest.mark.faults]
BATCH = 4  # results held back, then published again last-first


async def test_duplicated_and_reordered_results_change_nothing(own_runtime, operator_box):
    info = own_runtime.info
    nc = await connect(info.nats_url)
    js = nc.jetstream()
    await ensure_streams(js)
    r = Redis.from_url(info.redis_url)
    plan, digest = await _stored_cluster(r, "dup")
    svc = create_service(DispatcherSettings(nats_url=info.nats_url, redis_url=info.redis_url, owner="o", mode="lab",
                                            health_interval_s=0))
    await svc.start()
    fleet = await _null_fleet(nc, js, info.nats_url, "dup", plan, r, operator_box)
    held: list[tuple[str, bytes]] = []
    resent = 0

    async def replay(msg) -> None:  # noqa: ANN001 - a nats-py message
        nonlocal resent
        if msg.headers and msg.headers.get("bke-test") == "replayed":
            return
        held.append((msg.subject, msg.data))
        if len(held) >= BATCH:
            batch, held[:] = list(held), []
            for subject, data in reversed(batch):  # duplicated, and out of order
                await js.publish(subject, data, headers={"bke-test": "replayed"})
                resent += 1

    relay = await nc.subscribe("bke.v1.agent.dup.*.result", cb=replay)
    try:
        async with EventWatch(nc, ["bke.v1.install.dup.finished"]) as watch:
            await fleet.start()
            nodes = [n.hostname for n in plan.nodes]
            await _announce(js, "dup", digest, nodes, _ids(fleet))
            await _announce(js, "dup", digest, nodes, _ids(fleet))  # every service's event twice too
            done = await watch.wait_for(lambda e: True, timeout=90)
            # anything still to arrive is a duplicate: give it the time of one more finished event
            assert not await watch.wait_more(1, timeout=3.0), "a second install.finished was published"
        assert done.data["status"] == "Succeeded", done.data
        assert resent >= BATCH, "the relay replayed nothing: the test would prove nothing"
        # node-env x4, certs x4, etcd x3, init x1, join x2, workers x1, health x4: each ran once
        assert fleet.executed == 19
        st = DispatcherState(r)
        for slug in ("node-env", "certs", "etcd", "workers"):
            cmds = await st.all_commands("dup", slug)
            assert cmds and all(c["status"] == "Succeeded" for c in cmds.values()), (slug, cmds)
            phase = await st.phase("dup", slug)  # a duplicate counted twice would push `ok` past the targets
            assert int(phase["ok"]) == len(cmds) and int(phase.get("failed") or 0) == 0, (slug, phase)
    finally:
        await relay.unsubscribe()
        await fleet.stop(grace=1.0)
        await svc.stop()
        await r.aclose()
        await nc.close()
