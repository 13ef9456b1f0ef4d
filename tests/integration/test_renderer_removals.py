"""Nodes removed from a running cluster leave the renderer's records at once (remove-nodes.finished,
bke.adapters.forgetting.on_nodes_removed): the renderer, on real NATS and under its own Redis ACL user,
drops the rendered files and the meta entries (`nodes`, `secretPaths`) of the nodes whose removal
finished, keeps every other node's, and a redelivery changes nothing."""
from __future__ import annotations

import asyncio
import time

import pytest
import redis.asyncio as aioredis
from nats.aio.client import Client as NatsClient

from bke.adapters.bus.streams import ensure_streams
from bke.contracts.base import schema_headers
from bke.contracts.membership import REMOVE_NODES_FINISHED, MembershipNode, RemoveNodesFinished
from bke.core.plan import plan_spec_text
from bke.adapters.runtime import EmbeddedRuntime, redis_acl
from bke.adapters.state.nodefiles import RedisNodeFiles
from bke_renderer.app import create_service
from bke_renderer.service_core import ensure_rendered
from bke_renderer.settings import RendererSettings
from bke_renderer.store_redis import RedisRenderStore, render_keys

from tests.unit.core.render.test_render_support import golden_spec

pytestmark = pytest.mark.integration


async def _until(check, what: str, timeout: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.05)


async def test_the_renderer_drops_the_files_of_nodes_whose_removal_finished(
        runtime: EmbeddedRuntime, nats_url: str, redis_client: aioredis.Redis, nats_client: NatsClient) -> None:
    assert runtime.info is not None
    plan = plan_spec_text(golden_spec("1.34")).plan
    assert plan is not None
    store = RedisRenderStore(redis_client)
    await ensure_rendered(plan, store, offload=False)
    files = RedisNodeFiles(redis_client)
    assert set(await files.nodes("t", "render")) == {"m1", "m2", "e1", "ev1", "p1", "w1"}
    assert (await store.load("t")).node("m2").file("/etc/keepalived/keepalived.conf").secret  # type: ignore[union-attr]

    # as the renderer runs in a deployment: its own Redis user (bke.adapters.runtime.redis_acl)
    url = redis_acl.service_url(runtime.workdir, runtime.info.redis_url, "renderer")
    svc = create_service(RendererSettings(nats_url=nats_url, redis_url=url, max_deliver=3))
    await svc.start()
    try:
        js = nats_client.jetstream()
        await ensure_streams(js)
        # m2 and w1 finished their removal; p1 stopped half-way (it keeps its files)
        ev = RemoveNodesFinished(request_id="rm-1", cluster="t", status="Failed", reason="p1: drain", at="t",
                                 nodes=[MembershipNode(hostname="m2", status="Succeeded", stage="done"),
                                        MembershipNode(hostname="w1", status="Succeeded", stage="done"),
                                        MembershipNode(hostname="p1", status="Failed", stage="drain")])
        await js.publish(REMOVE_NODES_FINISHED, ev.to_bytes(), headers=schema_headers({"Nats-Msg-Id": "rm-1"}))

        async def gone() -> bool:
            return set(await files.nodes("t", "render")) == {"m1", "e1", "ev1", "p1"}

        await _until(gone, "the removed nodes' rendered files are still there")
        left = await store.load("t")
        assert left is not None and [n.hostname for n in left.nodes] == ["m1", "e1", "ev1", "p1"]
        assert left.node("m1").file("/etc/keepalived/keepalived.conf").secret  # the other master's flag kept
        meta = await redis_client.get(render_keys("t")["meta"])
        assert '"m2"' not in meta and '"w1"' not in meta
        assert await files.digest("t", "render") is None  # no plan's render any more: the next one writes it whole
        before = {k: await redis_client.dump(k) for k in (render_keys("t")["files"], render_keys("t")["meta"])}

        # a redelivery (a new message id: JetStream would drop the same one) changes nothing
        await js.publish(REMOVE_NODES_FINISHED, ev.to_bytes(), headers=schema_headers({"Nats-Msg-Id": "rm-1-again"}))

        async def handled() -> bool:
            info = await js.consumer_info("BKE_EVENTS", "renderer-removals")
            return info.num_pending == 0 and info.num_ack_pending == 0

        await _until(handled, "the redelivered event was not handled")
        assert {k: await redis_client.dump(k) for k in before} == before
    finally:
        await svc.stop()

    # the plan rendered again (the same one: the digest was dropped with the nodes) is whole again
    again = await ensure_rendered(plan, store, offload=False)
    assert again.stored and len(await files.nodes("t", "render")) == 6
