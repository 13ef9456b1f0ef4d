"""The renderer's Redis store and ensure_rendered against a real Redis: what the dispatcher reads,
round trips, the VRRP password created once, idempotent re-renders."""
from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from bke.core.plan import plan_spec_text
from bke.adapters.state.nodefiles import RedisNodeFiles
from bke_renderer.service_core import ensure_rendered
from bke_renderer.store_redis import RedisRenderStore, render_keys

from tests.unit.core.render.test_render_support import golden_spec, spec_text

pytestmark = pytest.mark.integration


def _plan(text: str):
    out = plan_spec_text(text)
    assert out.plan is not None
    return out.plan


async def test_ensure_rendered_is_idempotent_and_stores_what_the_dispatcher_reads(redis_client: aioredis.Redis) -> None:
    store = RedisRenderStore(redis_client)
    plan = _plan(golden_spec("1.34"))
    calls: list[int] = []

    def new_password() -> str:
        calls.append(1)
        return "Redis123"

    first = await ensure_rendered(plan, store, new_password=new_password)
    second = await ensure_rendered(plan, store, new_password=new_password)
    assert first.stored and not second.stored and first.digest == second.digest and len(calls) == 2
    assert await redis_client.get(render_keys(plan.cluster)["vrrp"]) == "Redis123"

    files = await RedisNodeFiles(redis_client).get(plan.cluster, "render", "m1")
    assert files is not None and any(f.path == "/etc/kubernetes/manifests/kube-apiserver.yaml" for f in files)
    assert await RedisNodeFiles(redis_client).digest(plan.cluster, "render") == first.digest
    addons = await redis_client.hgetall(render_keys(plan.cluster)["addons"])
    assert set(addons) == {"rbac", "kube-proxy", "coredns"} and "kind: DaemonSet" in addons["kube-proxy"]

    loaded = await store.load(plan.cluster)
    assert loaded is not None and loaded.digest == first.digest
    assert loaded.node("m1").file("/etc/keepalived/keepalived.conf").secret
    node = await store.load_node(plan.cluster, "w1")
    assert node is not None and node.digest == loaded.node("w1").digest


async def test_a_changed_plan_replaces_the_whole_set(redis_client: aioredis.Redis) -> None:
    store = RedisRenderStore(redis_client)
    nodes = [("m1", "10.9.0.1", ["master", "etcd"]), ("w1", "10.9.0.2", ["node"]), ("w2", "10.9.0.3", ["node"])]
    a = await ensure_rendered(_plan(spec_text(nodes, endpoint=None)), store, offload=False)
    b = await ensure_rendered(_plan(spec_text(nodes[:2], endpoint=None)), store, offload=False)
    assert a.digest != b.digest and b.stored and b.nodes == 2
    assert await RedisNodeFiles(redis_client).count("t", "render") == 2
    assert (await store.load("t")).digest == b.digest


async def test_racing_renderers_share_one_vrrp_password(redis_client: aioredis.Redis) -> None:
    store = RedisRenderStore(redis_client)
    values = iter(["First111", "Second22", "Third333"])
    got = await asyncio.gather(*(store.vrrp_password("race", lambda: next(values)) for _ in range(3)))
    assert len(set(got)) == 1


async def test_missing_cluster_loads_nothing(redis_client: aioredis.Redis) -> None:
    store = RedisRenderStore(redis_client)
    assert await store.load("nope") is None and await store.load_node("nope", "m1") is None and await store.digest("nope") is None
