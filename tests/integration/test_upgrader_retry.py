"""`RetryUpgrade` through the upgrader's handler (bke_upgrader.retries), on a real Redis.

An upgrade of the split-etcd example finished with one worker left out (stored as the upgrader
stores it: the run and every node's versions in one transaction). The dispatcher's status
answer is given as the bytes it would send; heartbeats are in Redis as the dispatcher keeps
them. A retry of the left-out worker is accepted and stored as a new run serving only it; one
naming a node that is not behind, a dead agent, or a retry while that run is running, is refused
with its reason."""
from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
from redis import asyncio as aioredis

from bke.contracts.status import ClusterStatus, NodeCounts
from bke.contracts.upgrade import UPGRADE_ACCEPTED, UPGRADE_REJECTED, RetryUpgrade, UpgradeAccepted, UpgradeRejected
from bke.core.spec.roles import is_master
from bke.adapters.state import PlanCache, RedisPlanStore, plan_digest
from bke.adapters.state.keys.dispatcher import heartbeat_key
from bke.core.upgrade import change_of, expand_order, resolve_target
from bke.core.upgrade.node_versions import settled
from bke.core.upgrade.run import finish, new_run
from bke.core.upgrade.run_request import UpgradeRequest
from bke_upgrader.facts import LiveFacts
from bke_upgrader.operation import Upgrades
from bke_upgrader.ports import ClusterApi, Commands, Records, RunSettings
from bke_upgrader.renders import Renders
from bke_upgrader.retries import Retries
from bke_upgrader.store import UpgradeStore

from tests.agent_facts_helpers import with_agent_facts
from ..unit.upgrade_helpers import SPLIT, plan_of

pytestmark = pytest.mark.integration
FROM = {"kubernetes": "1.33.2", "etcd": "3.5.1", "containerd": "2.1.1"}
TO = {"kubernetes": "1.34.1", "etcd": "3.5.2", "containerd": "2.1.1"}


def _now() -> datetime:
    return datetime.now(timezone.utc)


async def _setup(redis: aioredis.Redis):  # type: ignore[no-untyped-def]
    plan = plan_of(SPLIT)
    pj = plan.to_json()
    assert await RedisPlanStore(redis).save(plan, pj, plan_digest(pj), "install-1", _now().isoformat())
    workers = [n.hostname for n in plan.nodes if n.registers and not is_master(n.roles)]
    left = workers[0]
    t = resolve_target(plan, "1.34.1", "3.5.2")
    run = new_run("r1", plan.cluster, FROM, TO, expand_order(plan, change_of(plan, t), None, [left]),
                  [n.hostname for n in plan.nodes], "t0", left_out=[left],
                  request=UpgradeRequest(request_id="r1", cluster=plan.cluster, kubernetes_version=TO["kubernetes"],
                                         max_unavailable=None, drain_timeout_s=300.0))
    for s in run.steps:  # as a run that went through every step leaves them
        s.status = "Succeeded"
    finish(run, True, "t1")
    store = UpgradeStore(redis)
    assert await store.start(run, lambda current: "") == ""
    await store.save_end(run, settled(run, {}, {}))
    beat = _now().isoformat()
    await redis.hset(heartbeat_key(plan.cluster), mapping={n.hostname: beat for n in plan.nodes})
    status = ClusterStatus(cluster=plan.cluster, status="Succeeded", request_id="install-1", phases=[],
                           node_counts=NodeCounts(total=len(plan.nodes)), node_selection="none", nodes=[], nodes_matched=0)

    async def dispatcher(subject: str, payload: bytes, timeout: float) -> bytes:
        return status.to_bytes()

    facts = LiveFacts(with_agent_facts(redis, dispatcher), _now, heartbeat_stale_s=90.0, timeout_s=1.0)
    kicked: list[str] = []
    upgrades = Upgrades(Records(store, PlanCache(redis), RedisPlanStore(redis), facts),
                        Commands(None, None, Renders(), None, None), ClusterApi(None, None),  # type: ignore[arg-type]
                        RunSettings("retry-test", 30_000, _now))
    upgrades.kick = kicked.append
    return plan, left, workers, store, Retries(upgrades), kicked


async def test_a_left_out_worker_is_retried_alone_and_other_nodes_are_refused(redis_client: aioredis.Redis) -> None:
    plan, left, workers, store, retries, kicked = await _setup(redis_client)

    [no] = await retries.on_retry(RetryUpgrade(request_id="r2", cluster=plan.cluster, nodes=[workers[1]]))
    assert no.subject == UPGRADE_REJECTED and isinstance(no.message, UpgradeRejected)
    assert f"{workers[1]} runs kubernetes 1.34.1, etcd 3.5.2" in no.message.message
    assert (await store.load(plan.cluster)).request_id == "r1"  # type: ignore[union-attr]  # nothing started

    await redis_client.hset(heartbeat_key(plan.cluster), left, "2020-01-01T00:00:00+00:00")
    [dead] = await retries.on_retry(RetryUpgrade(request_id="r3", cluster=plan.cluster, nodes=[left]))
    assert isinstance(dead.message, UpgradeRejected) and f"no live agent on {left}" in dead.message.message
    await redis_client.hset(heartbeat_key(plan.cluster), left, _now().isoformat())

    accepted, changed = await retries.on_retry(RetryUpgrade(request_id="r4", cluster=plan.cluster, nodes=[left]))
    assert accepted.subject == UPGRADE_ACCEPTED and isinstance(accepted.message, UpgradeAccepted)
    ans = accepted.message
    assert (ans.retry_of, ans.nodes, ans.current.kubernetes, ans.target.kubernetes) == ("r1", [left], "1.33.2", "1.34.1")
    assert [s.name for s in ans.steps] == ["pre-checks", "agents", "workers", "post-checks"]
    assert json.loads(changed.message.to_bytes())["upgrade"]["retryOf"] == "r1"
    run = await store.load(plan.cluster)
    assert run is not None and run.request_id == "r4" and run.status == "Running" and kicked == [plan.cluster]
    assert {h for s in run.steps for b in s.batches for h in b} == {left}

    [busy] = await retries.on_retry(RetryUpgrade(request_id="r5", cluster=plan.cluster, nodes=[left]))
    assert isinstance(busy.message, UpgradeRejected) and "upgrade r4" in busy.message.message
    assert await retries.on_retry(RetryUpgrade(request_id="r4", cluster=plan.cluster, nodes=[left])) == []  # a redelivery


async def test_a_malformed_retry_is_rejected_naming_its_field(redis_client: aioredis.Redis) -> None:
    plan, _, _, _, retries, _ = await _setup(redis_client)
    [bad] = await retries.on_retry_bytes(json.dumps({"requestId": "r9", "cluster": plan.cluster, "nodes": "w1"}).encode())
    assert isinstance(bad.message, UpgradeRejected) and bad.message.request_id == "r9" and "nodes" in bad.message.message
