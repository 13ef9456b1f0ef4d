"""Planner replicas on one real NATS and Redis: they agree on one plan per cluster; a plan whose
install failed before any node changed may be replaced by a corrected spec; refused flags are
refused at plan time. Servers are started by the session fixtures (tests/conftest.py)."""
from __future__ import annotations

import asyncio
import json
import time
import uuid
from datetime import datetime, timezone
from functools import partial
from pathlib import Path

import pytest
from redis.asyncio import Redis

from bke.adapters.bus import EventWatch
from bke.adapters.bus.handler import typed
from bke.contracts import CLUSTER_REJECTED, INSTALL_CLUSTER, PLAN_CREATED, InstallCluster
from bke.contracts.install import InstallFinished, install_subject
from bke.core.plan import Plan, plan_spec_text
from bke.adapters.state import RedisPlanStore, plan_digest
from bke.adapters.state.keys.plan import plan_meta_key
from bke.adapters.state.keys.planner import plan_replaceable_key
from bke_planner.app import create_service
from bke_planner.handlers import PlannerDeps, handle_install_cluster
from bke_planner.settings import PlannerSettings

pytestmark = pytest.mark.integration
SEED = open("examples/seed-3m1w.yaml").read()
REFUSED = (Path(__file__).parent.parent / "fixtures" / "client-cert-auth-false.yaml").read_text()
CERT_AUTH_PATH = "cluster.spec.clusterConfig.cluster.etcd.extraArgs.client-cert-auth"


def seed(name: str, *, changed: int = 0) -> str:
    """The seed spec under `name`; `changed` 1 or 2 gives two other plans (an etcd-events or
    etcd-pods member on the worker)."""
    text = SEED.replace("name: seed", f"name: {name}")
    if changed == 1:
        text = text.replace("role: [node]", "role: [node, etcd-event]")
    elif changed == 2:
        text = text.replace("role: [node]", "role: [node, etcd-pod]")
    assert changed == 0 or text != SEED.replace("name: seed", f"name: {name}")
    return text


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def request(nats_client, rid: str, spec: str) -> None:
    await nats_client.jetstream().publish(INSTALL_CLUSTER, json.dumps({"requestId": rid, "spec": spec}).encode())


async def finished(nats_client, cluster: str, *, status: str, nodes_changed: bool) -> None:
    ev = InstallFinished(request_id=str(uuid.uuid4()), cluster=cluster, status=status, at=datetime.now(timezone.utc).isoformat(),
                         kind="operational" if status == "Failed" else None, nodes_changed=nodes_changed)
    await nats_client.jetstream().publish(install_subject(cluster, "finished"), ev.to_bytes())


async def until(predicate, timeout: float = 15.0) -> None:
    """Poll an async predicate until true or the deadline (no sleep as synchronisation)."""
    deadline = time.monotonic() + timeout
    while not await predicate():
        assert time.monotonic() < deadline, "condition not met before the deadline"
        await asyncio.sleep(0.05)


def by_request(rid):
    return lambda e: e.data.get("requestId") == rid


@pytest.fixture
async def watch(nats_client):
    async with EventWatch(nats_client, [PLAN_CREATED, CLUSTER_REJECTED, "bke.v1.deadletter.>"]) as w:
        yield w


@pytest.fixture
async def planners(nats_url, redis_url, redis_client):
    """Two planner replicas sharing the durable consumers, as two deployments would."""
    svcs = [create_service(PlannerSettings(nats_url=nats_url, redis_url=redis_url, max_deliver=3)) for _ in range(2)]
    for svc in svcs:
        await svc.start()
    try:
        yield svcs
    finally:
        for svc in svcs:
            await svc.stop()


async def test_refused_flag_is_rejected_at_plan_time_with_its_path(planners, watch, nats_client, redis_client):
    rid = str(uuid.uuid4())
    await request(nats_client, rid, REFUSED)
    rej = await watch.wait_for(by_request(rid), timeout=15)
    assert rej.subject == CLUSTER_REJECTED and rej.data["cluster"] == "refused"
    assert [e["path"] for e in rej.data["errors"]] == [CERT_AUTH_PATH]
    assert "client-cert-auth=false" in rej.data["errors"][0]["message"]
    assert await redis_client.exists(plan_meta_key("refused")) == 0


class BarrierStore(RedisPlanStore):
    """Holds each replica's first read until both have read: both see "no plan yet", so both
    try to store and exactly one write must lose (the interleaving the race needs, forced)."""

    def __init__(self, redis: Redis, barrier: asyncio.Barrier):
        super().__init__(redis)
        self.barrier, self.reads = barrier, 0

    async def meta(self, cluster: str):
        record = await super().meta(cluster)
        self.reads += 1
        if self.reads == 1:
            await self.barrier.wait()
        return record


async def test_two_replicas_two_specs_one_new_cluster_forced_interleaving(nats_client, redis_url, redis_client, watch):
    redis = Redis.from_url(redis_url)

    async def publish(payload: bytes, subject: str, headers: dict[str, str]) -> None:
        await nats_client.jetstream().publish(subject, payload, headers=headers or None)

    async def no_blob(ref: str) -> bytes:
        raise AssertionError("specs travel inline here")

    try:
        for round_ in range(5):
            name = unique("race")
            barrier = asyncio.Barrier(2)
            stores = [BarrierStore(redis, barrier), BarrierStore(redis, barrier)]
            deps = [PlannerDeps(store=s, fetch_blob=no_blob, now=lambda: datetime.now(timezone.utc)) for s in stores]
            works = [typed(InstallCluster, partial(handle_install_cluster, deps=d), publish) for d in deps]
            rids = [str(uuid.uuid4()), str(uuid.uuid4())]
            bodies = [json.dumps({"requestId": rids[i], "spec": seed(name, changed=i)}).encode() for i in range(2)]
            await asyncio.gather(*(works[i](bodies[i]) for i in range(2)))
            events = [await watch.wait_for(by_request(r), timeout=15) for r in rids]
            assert sorted(e.subject for e in events) == sorted([PLAN_CREATED, CLUSTER_REJECTED]), round_
            assert all(s.reads == 2 for s in [stores[i] for i, e in enumerate(events) if e.subject == CLUSTER_REJECTED])
            await _one_winner(events, name, redis_client)
    finally:
        await redis.aclose()


async def test_two_replica_services_two_specs_at_the_same_moment(planners, watch, nats_client, redis_client):
    for _ in range(5):
        name = unique("twin")
        rids = [str(uuid.uuid4()), str(uuid.uuid4())]
        await asyncio.gather(*(request(nats_client, rids[i], seed(name, changed=i)) for i in range(2)))
        events = [await watch.wait_for(by_request(r), timeout=15) for r in rids]
        await _one_winner(events, name, redis_client)


async def _one_winner(events, name: str, redis_client) -> None:
    """Exactly one plan.created, whose digest is the one stored; the other is refused by name."""
    created = [e for e in events if e.subject == PLAN_CREATED]
    rejected = [e for e in events if e.subject == CLUSTER_REJECTED]
    assert len(created) == 1 and len(rejected) == 1
    assert await redis_client.hget(plan_meta_key(name), "digest") == created[0].data["planDigest"]
    err = rejected[0].data["errors"][0]
    assert rejected[0].data["cluster"] == name and err["path"] == "cluster.metadata.name"
    assert "already exists with a different spec" in err["message"]


async def test_a_spec_refused_before_any_node_changed_may_be_replaced(planners, watch, nats_client, redis_client):
    name = unique("fix")
    first = str(uuid.uuid4())
    await request(nats_client, first, seed(name))
    created = await watch.wait_for(by_request(first), timeout=15)
    assert created.subject == PLAN_CREATED
    old = created.data["planDigest"]

    # no install outcome yet: a different spec is refused as before
    early = str(uuid.uuid4())
    await request(nats_client, early, seed(name, changed=1))
    assert (await watch.wait_for(by_request(early), timeout=15)).subject == CLUSTER_REJECTED

    # the install failed before any command reached a node: the planner marks the plan
    await finished(nats_client, name, status="Failed", nodes_changed=False)
    await until(lambda: _marked(redis_client, name, old))

    corrected = str(uuid.uuid4())
    await request(nats_client, corrected, seed(name, changed=1))
    replaced = await watch.wait_for(by_request(corrected), timeout=15)
    assert replaced.subject == PLAN_CREATED and replaced.data["planDigest"] != old
    assert await redis_client.hget(plan_meta_key(name), "digest") == replaced.data["planDigest"]
    stored = Plan.model_validate_json(await redis_client.get(replaced.data["planKey"]))
    assert [c.name for c in stored.etcd_clusters] == ["etcd-data", "etcd-events"]
    assert await redis_client.exists(plan_replaceable_key(name)) == 0  # spent by the replacement

    # the mark is spent: another change is refused, the replaced spec again is idempotent
    again = str(uuid.uuid4())
    await request(nats_client, again, seed(name, changed=2))
    assert (await watch.wait_for(by_request(again), timeout=15)).subject == CLUSTER_REJECTED
    same = str(uuid.uuid4())
    await request(nats_client, same, seed(name, changed=1))
    assert (await watch.wait_for(by_request(same), timeout=15)).data["planDigest"] == replaced.data["planDigest"]
    assert not [e for e in watch.seen if e.subject.startswith("bke.v1.deadletter")]


async def test_once_a_node_changed_the_spec_is_not_replaceable(planners, watch, nats_client, redis_client):
    name = unique("ran")
    first = str(uuid.uuid4())
    await request(nats_client, first, seed(name))
    old = (await watch.wait_for(by_request(first), timeout=15)).data["planDigest"]
    await finished(nats_client, name, status="Failed", nodes_changed=False)
    await until(lambda: _marked(redis_client, name, old))
    # a retry then changed nodes before failing again: the mark goes
    await finished(nats_client, name, status="Failed", nodes_changed=True)
    await until(lambda: _unmarked(redis_client, name))
    rid = str(uuid.uuid4())
    await request(nats_client, rid, seed(name, changed=1))
    rej = await watch.wait_for(by_request(rid), timeout=15)
    assert rej.subject == CLUSTER_REJECTED and rej.data["errors"][0]["path"] == "cluster.metadata.name"
    assert await redis_client.hget(plan_meta_key(name), "digest") == old


async def test_a_cluster_without_a_plan_is_never_marked(redis_client):
    store = RedisPlanStore(redis_client)
    name = unique("ghost")
    assert not await store.mark_replaceable(name)
    assert await store.replaceable(name) is None


async def test_replacing_replicas_cannot_both_win(redis_client):
    name = unique("cas")
    plans = [plan_spec_text(seed(name, changed=i)).plan for i in range(3)]
    jsons = [p.to_json() for p in plans]
    digests = [plan_digest(j) for j in jsons]
    store = RedisPlanStore(redis_client)
    assert await store.save(plans[0], jsons[0], digests[0], "r0", "t0")
    assert not await store.replace(plans[1], jsons[1], digests[1], digests[0], "r1", "t1")  # not marked
    assert not await store.mark_replaceable(name, digests[1])  # an outcome about another plan marks nothing
    assert await store.replaceable(name) is None
    assert await store.mark_replaceable(name, digests[0])
    results = await asyncio.gather(*(store.replace(plans[i], jsons[i], digests[i], digests[0], f"r{i}", "t") for i in (1, 2)))
    assert sorted(results) == [False, True]
    winner = digests[1 + results.index(True)]
    assert (await store.meta(name)).digest == winner and await store.replaceable(name) is None


async def _marked(redis_client, cluster: str, digest: str | None) -> bool:
    mark = await redis_client.get(plan_replaceable_key(cluster))
    return mark is not None and (digest is None or mark == digest)


async def _unmarked(redis_client, cluster: str) -> bool:
    return await redis_client.get(plan_replaceable_key(cluster)) is None
