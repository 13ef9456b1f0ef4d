"""Pausing a cluster's operations (bke.contracts.pause) on a real NATS and Redis: an install
paused mid-way takes no new step until resumed, then finishes, nothing run twice."""
from __future__ import annotations

import asyncio
import logging

import pytest
from redis.asyncio import Redis

from bke.adapters.bus import EventWatch
from bke.adapters.bus.streams import ensure_streams
from bke.contracts.pause import PAUSE_CLUSTER, PauseCluster, pause_subject
from bke.adapters.runner import DONE, Runner
from bke_dispatcher.app import create_service
from bke_dispatcher.settings import DispatcherSettings
from tests.integration.test_dispatcher import _announce, _ids, _null_fleet, _stored_cluster

pytestmark = pytest.mark.integration


async def _until(pred, timeout: float = 30.0, what: str = "condition") -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not pred():
        assert asyncio.get_running_loop().time() < deadline, f"no {what} within {timeout}s"
        await asyncio.sleep(0.02)


async def test_runner_holds_a_paused_cluster_until_kicked_after_resume():
    passes: list[str] = []
    asked: list[str] = []
    paused = {"c": True}

    class Engine:
        async def reconcile(self, cluster: str):
            passes.append(cluster)
            return DONE

    async def is_paused(cluster: str) -> bool:
        asked.append(cluster)
        return paused.get(cluster, False)

    runner = Runner(Engine(), debounce_s=0.0, paused=is_paused)
    try:
        runner.kick("c")
        runner.kick("other")
        await _until(lambda: "other" in passes and "c" in asked, what="first passes")
        runner.kick("c")  # a result arriving while paused: checked again, still held
        await _until(lambda: asked.count("c") >= 2, what="second check")
        assert passes == ["other"]
        paused["c"] = False
        runner.kick("c")  # what a resume does
        await _until(lambda: "c" in passes, what="the pass after the resume")
    finally:
        await runner.stop()


async def test_an_install_paused_mid_way_takes_no_new_step_until_resumed(
        nats_url, redis_url, redis_client, nats_client, operator_box, caplog):
    caplog.set_level(logging.INFO, logger="bke.reconcile")
    r = Redis.from_url(redis_url)
    js = nats_client.jetstream()
    await ensure_streams(js)
    svc = fleet = None
    try:
        plan, digest = await _stored_cluster(r, "held")
        svc = create_service(DispatcherSettings(nats_url=nats_url, redis_url=redis_url, owner="p", mode="lab",
                                                health_interval_s=0))
        await svc.start()
        fleet = await _null_fleet(nats_client, js, nats_url, "held", plan, r, operator_box)
        async with EventWatch(nats_client, ["bke.v1.install.held.phase", "bke.v1.install.held.finished",
                                            pause_subject("held")]) as watch:
            await fleet.start()
            await _announce(js, "held", digest, [n.hostname for n in plan.nodes], _ids(fleet))
            # mid-way: once the second phase (certs) runs, pause
            await watch.wait_for(lambda e: e.data.get("phase") == "certs" and e.data.get("status") == "Running", timeout=60)
            await js.publish(PAUSE_CLUSTER, PauseCluster(request_id="p1", cluster="held", paused=True, reason="test").to_bytes())
            await watch.wait_for(lambda e: e.data.get("requestId") == "p1" and e.data.get("service") == "dispatcher", timeout=30)
            # the loop's next pass finds the flag (the in-flight answers kick it): from then on it holds
            await _until(lambda: any(rec.getMessage().startswith("paused") and getattr(rec, "cluster", "") == "held"
                                     for rec in caplog.records), what="the loop holding")
            # every phase event published before the hold has reached us once a marker sent after it
            # on the same subject (one subscription: delivered in order) comes back
            await nats_client.publish("bke.v1.install.held.phase", b'{"marker": "held"}')
            await watch.wait_for(lambda e: e.data.get("marker") == "held", timeout=10)
            before = {id(e) for e in watch.seen}
            running = {e.data.get("phase") for e in watch.seen if e.data.get("status") == "Running"}
            # an observation window (not synchronisation): no phase starts while paused
            with pytest.raises(TimeoutError):
                await watch.wait_for(lambda e: id(e) not in before and e.subject.endswith(".phase")
                                     and e.data.get("status") == "Running", timeout=3)
            assert "health" not in running  # it was paused mid-way, not at the end
            executed_while_paused = fleet.executed
            await js.publish(PAUSE_CLUSTER, PauseCluster(request_id="p2", cluster="held", paused=False).to_bytes())
            done = await watch.wait_for(lambda e: e.subject.endswith(".finished"), timeout=60)
        assert done.data["status"] == "Succeeded"
        assert executed_while_paused < 19 and fleet.executed == 19 and fleet.replayed == 0
    finally:
        if fleet is not None:
            await fleet.stop(grace=1.0)
        if svc is not None:
            await svc.stop()
        await r.aclose()
