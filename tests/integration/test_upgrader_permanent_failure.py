"""A permanent error inside an upgrade pass ends the run, on real Redis and NATS.

The upgrader's own `Upgrades` (bke_upgrader.operation) runs a stored upgrade of the split-etcd
example; its signing adapter is the one thing replaced: it refuses one node of the agents step
with a PermanentError (as a command-signing key of an unknown stored form would). The pass must
end the run Failed with a reason naming the step and that node, publish the view on
`bke.v1.upgrade.<cluster>.changed`, release the upgrade lease and tell the runner to stop;
an outage raised by the same adapter (a Redis ConnectionError) must instead leave the run
Running, and the next pass resumes it."""
from __future__ import annotations

import asyncio
from datetime import datetime, timezone

import pytest
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from redis import asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError

from bke.contracts.agent import AgentCommand
from bke.contracts.upgrade import UpgradeChanged, upgrade_subject
from bke.core.errors import PermanentError
from bke.core.plan import Plan
from bke.adapters.state import PlanCache, RedisPlanStore, plan_digest
from bke.adapters.state.keys.shared import lease_key
from bke.core.upgrade import change_of, expand_order, resolve_target
from bke.core.upgrade.failure import UPGRADER_STEP
from bke.core.upgrade.run import new_run
from bke.core.upgrade.run_request import UpgradeRequest
from bke_upgrader.operation import Upgrades
from bke_upgrader.ports import ClusterApi, Commands, Records, RunSettings
from bke_upgrader.operation import LEASE
from bke_upgrader.renders import Renders
from bke_upgrader.store import UpgradeStore

from ..unit.upgrade_helpers import SPLIT, plan_of

pytestmark = pytest.mark.integration
EVENT_TIMEOUT_S = 10.0


def _now() -> datetime:
    return datetime.now(timezone.utc)


async def _stored_run(redis: aioredis.Redis, plan: Plan) -> UpgradeStore:
    pj = plan.to_json()
    assert await RedisPlanStore(redis).save(plan, pj, plan_digest(pj), "install-1", _now().isoformat())
    t = resolve_target(plan, "1.34.1", "3.5.2")
    run = new_run("r1", plan.cluster, {"kubernetes": "1.33.2", "etcd": "3.5.1", "containerd": "2.1.1"},
                  {"kubernetes": "1.34.1", "etcd": "3.5.2", "containerd": "2.1.1"},
                  expand_order(plan, change_of(plan, t), "100%"), [n.hostname for n in plan.nodes], _now().isoformat())
    run.request = UpgradeRequest(request_id=run.request_id, cluster=plan.cluster,
                                 kubernetes_version=run.target["kubernetes"], plan_digest=plan_digest(pj))
    store = UpgradeStore(redis)
    assert await store.start(run, lambda current: "") == ""
    return store


def _upgrades(store: UpgradeStore, redis: aioredis.Redis, nc: NatsClient, sign) -> Upgrades:  # type: ignore[no-untyped-def]
    async def publish(payload: bytes, subject: str, headers: dict[str, str]) -> None:
        await nc.publish(subject, payload, headers=headers or None)  # as Service.publish

    # only the adapters the pre-checks and agents steps use are given (no drain, addon,
    # checksum or snapshot is reached before the failure)
    return Upgrades(Records(store, PlanCache(redis), RedisPlanStore(redis), None),  # type: ignore[arg-type]
                    Commands(publish, sign, Renders(), None, None), ClusterApi(None, None),  # type: ignore[arg-type]
                    RunSettings("failure-test", 30_000, _now))


async def test_a_permanent_error_in_an_adapter_fails_the_run_naming_step_and_node(
        redis_client: aioredis.Redis, nats_client: NatsClient) -> None:
    plan = plan_of(SPLIT)
    store = await _stored_run(redis_client, plan)
    hosts = [n.hostname for n in plan.nodes]
    bad = hosts[2]
    signed: list[str] = []

    async def sign(cmd: AgentCommand) -> bytes:
        if cmd.node == bad:
            raise PermanentError("command-signing key stored in a form this BKE does not read")
        signed.append(cmd.node)
        return cmd.to_bytes()

    views: list[UpgradeChanged] = []
    failed = asyncio.Event()

    async def on_changed(msg: Msg) -> None:
        ev = UpgradeChanged.model_validate_json(msg.data)
        views.append(ev)
        if ev.upgrade.status == "Failed":
            failed.set()

    sub = await nats_client.subscribe(upgrade_subject(plan.cluster), cb=on_changed)
    try:
        upgrades = _upgrades(store, redis_client, nats_client, sign)
        outcome = await upgrades.reconcile(plan.cluster)
        await asyncio.wait_for(failed.wait(), EVENT_TIMEOUT_S)
    finally:
        await sub.unsubscribe()

    # the runner stops on "failed" (bke.adapters.runner): no "reconcile failed; retrying" loop
    assert outcome.status == "failed"
    assert outcome.reason.startswith(f"agents: node {bad}: the upgrader could not carry it out: PermanentError: "
                                     "command-signing key stored in a form"), outcome.reason
    assert signed == hosts[:2]  # the nodes before it were served; none after it
    run = await store.load(plan.cluster)
    assert run is not None and run.status == "Failed" and run.message == outcome.reason and run.finished_at
    agents = next(s for s in run.steps if s.name == "agents")
    assert agents.status == "Failed"
    assert [(f.hostname, f.failed_step) for f in run.failed] == [(bad, UPGRADER_STEP)]
    view = views[-1].upgrade
    assert view.message == outcome.reason and view.failed[0].hostname == bad and view.step == "agents"
    assert await redis_client.get(lease_key(plan.cluster, LEASE)) is None  # the lease is free
    # every node is left behind, with its versions, for `bke retry --nodes` (none was changed)
    nodes = await store.node_versions(plan.cluster)
    assert set(nodes) == set(hosts) and all(v.behind and v.version["kubernetes"] == "1.33.2" for v in nodes.values())
    assert nodes[bad].why == f"failed at agents ({UPGRADER_STEP})"
    # a later pass (a kick, a restart) finds the run finished and does nothing
    assert (await upgrades.reconcile(plan.cluster)).status == "done"


async def test_an_outage_in_the_same_adapter_waits_and_the_next_pass_resumes(
        redis_client: aioredis.Redis, nats_client: NatsClient) -> None:
    plan = plan_of(SPLIT)
    store = await _stored_run(redis_client, plan)
    away = [True]
    signed: list[str] = []

    async def sign(cmd: AgentCommand) -> bytes:
        if away[0]:
            raise RedisConnectionError("Connection refused")  # the signing key's store is away
        signed.append(cmd.node)
        return cmd.to_bytes()

    upgrades = _upgrades(store, redis_client, nats_client, sign)
    with pytest.raises(RedisConnectionError):
        await upgrades.reconcile(plan.cluster)  # the runner logs it and waits
    run = await store.load(plan.cluster)
    assert run is not None and run.status == "Running" and run.failed == []
    assert await redis_client.get(lease_key(plan.cluster, LEASE)) is None

    away[0] = False
    outcome = await upgrades.reconcile(plan.cluster)
    assert outcome.status == "wait"
    run = await store.load(plan.cluster)
    assert run is not None and run.status == "Running"
    agents = next(s for s in run.steps if s.name == "agents")
    assert agents.sent and signed == [n.hostname for n in plan.nodes]
