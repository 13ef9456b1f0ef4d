"""Poison and floods are bounded: a result for a cluster that does not exist
is dead-lettered at once with its reason (it was retried 402 times in six minutes); forged
heartbeats write nothing (5,000 made 5,000 Redis entries); 1,000 forged results published
before a real install's results do not stall it (they once filled the dispatcher's window)."""
from __future__ import annotations

import base64
import time
from datetime import datetime, timezone

import pytest
from redis.asyncio import Redis

from bke.adapters.bus import EventWatch
from bke.adapters.bus.streams import ensure_streams
from bke.contracts import DeadLettered
from bke.contracts.agent import AgentHeartbeat, CommandResult, agent_subject
from bke.adapters.state.keys.dispatcher import heartbeat_key
from bke_dispatcher.app import create_service
from bke_dispatcher.settings import DispatcherSettings

from .helpers import _announce, _ids, _null_fleet, _stored_cluster, ack_pending, eventually

pytestmark = [pytest.mark.integration, pytest.mark.faults]

FLOOD = 1000


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


def _forged_result(cluster: str, node: str) -> CommandResult:
    return CommandResult(command_id=f"{cluster}/etcd/{node}/0", cluster=cluster, node=node, agent_id="forged",
                         status="Succeeded", steps=[], started_at=_now(), finished_at=_now())


def _dispatcher(nats_url: str, redis_url: str, owner: str):
    return create_service(DispatcherSettings(nats_url=nats_url, redis_url=redis_url, owner=owner, mode="lab",
                                             health_interval_s=0))


async def test_a_result_for_an_unknown_cluster_is_dead_lettered_at_once_with_its_reason(
        nats_url, redis_url, redis_client, nats_client):
    js = nats_client.jetstream()
    await ensure_streams(js)
    svc = _dispatcher(nats_url, redis_url, "poison")
    await svc.start()
    try:
        forged = _forged_result("ghost", "m1")
        async with EventWatch(nats_client, ["bke.v1.deadletter.dispatcher"]) as watch:
            await js.publish(agent_subject("ghost", "m1", "result"), forged.to_bytes())
            ev = await watch.wait_for(lambda e: e.data["payloadB64"] == base64.b64encode(forged.to_bytes()).decode(), 15)
        dl = DeadLettered.model_validate(ev.data)
        assert dl.deliveries == 1 and dl.reason == "UnknownTarget: result 'ghost/etcd/m1/0' for unknown cluster 'ghost'"

        async def settled():
            return await ack_pending(nats_client, "dispatcher-results") == (0, 0)
        await eventually(settled, 10, "the forged result is acked, not retried")
        assert len(watch.seen) == 1
        assert await redis_client.keys("*ghost*") == []
    finally:
        await svc.stop()


async def test_forged_heartbeats_write_nothing(nats_url, redis_url, redis_client, nats_client):
    r = Redis.from_url(redis_url)
    plan, _ = await _stored_cluster(r, "hb")
    await r.aclose()
    svc = _dispatcher(nats_url, redis_url, "hb")
    await svc.start()
    try:
        before = set(await redis_client.keys("*"))
        real, other = plan.nodes[0].hostname, plan.nodes[1].hostname

        def beat(cluster: str, node: str) -> bytes:
            return AgentHeartbeat(cluster=cluster, node=node, agent_id="a", at=_now()).to_bytes()

        for i in range(2500):  # nodes of no stored plan, and made-up nodes of a real cluster
            await nats_client.publish(agent_subject("ghost", f"n{i}", "heartbeat"), beat("ghost", f"n{i}"))
            await nats_client.publish(agent_subject("hb", f"x{i}", "heartbeat"), beat("hb", f"x{i}"))
        # a real node's heartbeat on another node's subject
        await nats_client.publish(agent_subject("hb", other, "heartbeat"), beat("hb", real))
        await nats_client.publish(agent_subject("hb", real, "heartbeat"), beat("hb", real))  # the one real heartbeat

        async def recorded():
            return await redis_client.hgetall(heartbeat_key("hb"))
        # one connection, one subscription: delivered in order, so every forged one came first
        got = await eventually(recorded, 15, "the real heartbeat is recorded")
        assert list(got) == [real]
        assert set(await redis_client.keys("*")) == before | {heartbeat_key("hb")}
    finally:
        await svc.stop()


async def _install(nats_client, nats_url: str, redis_url: str, name: str, box) -> tuple[float, list[str]]:
    """Install a seed cluster with a null fleet; the seconds from the announcements to the end,
    and its nodes."""
    js = nats_client.jetstream()
    r = Redis.from_url(redis_url)
    plan, digest = await _stored_cluster(r, name)
    fleet = await _null_fleet(nats_client, js, nats_url, name, plan, r, box)
    await r.aclose()
    try:
        async with EventWatch(nats_client, [f"bke.v1.install.{name}.finished"]) as watch:
            await fleet.start()
            t0 = time.monotonic()
            await _announce(js, name, digest, [n.hostname for n in plan.nodes], _ids(fleet))
            done = await watch.wait_for(lambda e: True, timeout=120)
            took = time.monotonic() - t0
        assert done.data["status"] == "Succeeded", done.data
        return took, [n.hostname for n in plan.nodes]
    finally:
        await fleet.stop(grace=1.0)


@pytest.mark.parametrize("forged", ["unknown-cluster", "unknown-generation"])
async def test_a_flood_of_forged_results_does_not_stall_another_install(nats_url, redis_url, redis_client, nats_client,
                                                                       forged, operator_box):
    """Forged results for a cluster that does not exist are dead-lettered at once; those naming
    real nodes of a real cluster with a generation never sent wait (NotYetKnown, bounded) and
    must not take the window the real install's results need."""
    js = nats_client.jetstream()
    await ensure_streams(js)
    svc = _dispatcher(nats_url, redis_url, "flood")
    await svc.start()
    # names of their own: the streams keep an earlier variant's commands (and their ids)
    calm_name, busy_name = f"calm-{forged}", f"busy-{forged}"
    try:
        calm, known = await _install(nats_client, nats_url, redis_url, calm_name, operator_box)
        nodes = [f"n{i}" for i in range(FLOOD)]
        async with EventWatch(nats_client, ["bke.v1.deadletter.dispatcher"]) as dead:
            for i in range(FLOOD):  # all before the real install's first result
                if forged == "unknown-cluster":
                    res = _forged_result("ghost", nodes[i])
                else:
                    node = known[i % len(known)]
                    res = _forged_result(calm_name, node).model_copy(update={"command_id": f"{calm_name}/etcd/{node}/{9 + i}"})
                await js.publish(agent_subject(res.cluster, res.node, "result"), res.to_bytes())
            busy, _ = await _install(nats_client, nats_url, redis_url, busy_name, operator_box)
            if forged == "unknown-cluster":
                async def all_settled():
                    return len(dead.seen) >= FLOOD and await ack_pending(nats_client, "dispatcher-results") == (0, 0)
                await eventually(all_settled, 60, "every forged result is dead-lettered")
        print(f"\n{forged}: install alone {calm:.2f} s; after {FLOOD} forged results {busy:.2f} s")
        assert busy < 2 * calm + 5.0
        assert await redis_client.keys("*ghost*") == []
    finally:
        await svc.stop()
