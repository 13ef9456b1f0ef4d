"""The dispatcher's reset adapter against the real Redis of the session fixture, called as plain
functions (the bus is the e2e test's job): refused while the install runs or the cluster is
paused, the snapshot before any node, workers before etcd members with fixed command ids,
results folded in once, a redelivered request starting nothing new, a resumed dispatcher
carrying on, and a delete's end publishing `ClusterDeleted` once."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest
from redis.asyncio import Redis

from bke.contracts.agent import AgentCommand, CommandResult, StepResult
from bke.contracts.reset import ClusterDeleted, ResetChanged, ResetCluster
from bke.core.plan import plan_spec_text
from bke.adapters.state import PlanCache, RedisPlanStore, plan_digest
from bke_dispatcher.ops.reset.run import Resets, ResetStore
from bke_dispatcher.ops.rotation.run import RotationStore
from bke_dispatcher.state import DispatcherState
from tests.trust_helpers import signed, verifier

pytestmark = pytest.mark.integration
NOW = datetime(2026, 6, 1, tzinfo=timezone.utc)
PLAN = plan_spec_text(open("examples/seed-3m1w.yaml").read().replace("name: seed", "name: rst")).plan
RECIPIENT = "A" * 43 + "="  # 32 bytes, base64: the agents are not real here, nothing is sealed


class Key:
    async def recipient(self) -> str:
        return RECIPIENT


def result(cmd: AgentCommand, status: str = "Succeeded", stderr: str = "") -> CommandResult:
    step = StepResult(id=cmd.steps[-1].id, status=status, stderr=stderr)
    return CommandResult(command_id=cmd.command_id, cluster=cmd.cluster, node=cmd.node, agent_id="a", status=status,
                         steps=[step], started_at="t", finished_at="t")


@pytest.fixture
async def resets(redis_url, redis_client):
    r = Redis.from_url(redis_url)
    pj = PLAN.to_json()
    await RedisPlanStore(r).save(PLAN, pj, plan_digest(pj), "req", NOW.isoformat())
    sent: list[tuple[str, bytes, dict[str, str]]] = []
    kicks: list[str] = []
    paused: set[str] = set()

    async def publish(body: bytes, subject: str, headers: dict[str, str]) -> None:
        sent.append((subject, body, headers))

    async def is_paused(cluster: str) -> bool:
        return cluster in paused

    async def sign(cmd: AgentCommand) -> AgentCommand:
        return signed(cmd)

    state = DispatcherState(r)

    def make() -> Resets:  # a dispatcher (a restarted one is a new object on the same Redis)
        return Resets(ResetStore(r), RotationStore(r), state, PlanCache(r), is_paused, Key(), publish, lambda: NOW,
                      "me", kick=kicks.append, sign=sign)

    try:
        yield make, state, sent, paused
    finally:
        await r.aclose()


def commands(sent):
    return [AgentCommand.model_validate_json(b) for s, b, _ in sent if s.endswith(".command")]


def views(sent):
    return [ResetChanged.model_validate_json(b).reset for s, b, _ in sent if s == "bke.v1.reset.rst.changed"]


async def test_refused_while_the_install_runs_or_paused(resets):
    make, state, sent, paused = resets
    res = make()
    await state.start_install("rst", "req", NOW.isoformat())  # Running
    [out] = await res.on_request(ResetCluster(request_id="r1", cluster="rst"))
    assert out.subject == "bke.v1.reset.rejected" and "the install of rst is running" in out.message.message
    await state.set_install("rst", status="Succeeded")
    paused.add("rst")
    [out] = await res.on_request(ResetCluster(request_id="r1", cluster="rst"))
    assert "rst is paused" in out.message.message
    [out] = await res.on_request(ResetCluster(request_id="r1", cluster="nope"))
    assert "cluster nope has no plan" in out.message.message
    assert not commands(sent) and await res.store.load("rst") is None


async def test_delete_snapshot_first_then_nodes_by_rank_and_deleted_once(resets):
    make, state, sent, _ = resets
    res = make()
    await state.start_install("rst", "req", NOW.isoformat())
    await state.set_install("rst", status="Succeeded")
    [out] = await res.on_request(ResetCluster(request_id="d1", cluster="rst", delete=True))
    assert out.subject == "bke.v1.reset.accepted" and out.message.nodes == ["node1", "master1", "master2", "master3"]
    assert (await res.on_request(ResetCluster(request_id="d1", cluster="rst", delete=True)))[0].subject.endswith("accepted")
    assert len(views(sent)) == 1  # the redelivery started nothing new
    # 1. the snapshot, on the first member, before any node
    assert (await res.reconcile("rst")).status == "wait"
    [snap] = commands(sent)
    assert (snap.node, snap.command_id, snap.steps[0].type) == ("master1", "rst/reset@d1/master1/1", "etcd_snapshot")
    assert (await res.reconcile("rst")).status == "wait" and len(commands(sent)) == 1  # waits for it
    await res.on_result(result(snap))
    # 2. the worker, then (after a dispatcher restart) the etcd members together
    await res.reconcile("rst")
    [worker] = commands(sent)[1:]
    assert (worker.node, worker.command_id) == ("node1", "rst/reset@d1/node1/0")
    assert worker.steps[0].type == "reset_node" and worker.steps[0].binaries and worker.steps[0].etcd_data_dirs == []
    await res.on_result(result(worker))
    await res.on_result(result(worker))  # a duplicate counts once
    res = make()
    assert await res.resume_all() == ["rst"]
    await res.reconcile("rst")
    members = commands(sent)[2:]
    assert sorted(c.node for c in members) == ["master1", "master2", "master3"]
    assert all(c.steps[0].etcd_data_dirs == ["/var/lib/etcd"] for c in members)
    for c in members:
        await res.on_result(result(c))
    assert (await res.reconcile("rst")).status == "done"
    assert views(sent)[-1].status == "Succeeded" and views(sent)[-1].done == 4
    deleted = [(ClusterDeleted.model_validate_json(b), h) for s, b, h in sent if s == "bke.v1.cluster.deleted"]
    assert [(d.cluster, h["Nats-Msg-Id"]) for d, h in deleted] == [("rst", "deleted:rst:d1")]
    assert (await res.store.load("rst")).deleted_sent and await res.resume_all() == []
    assert all(verifier("rst", c.node).authentic(c) is None for c in commands(sent))  # every one signed


async def test_a_failed_node_ends_the_reset_with_its_reason(resets):
    make, state, sent, _ = resets
    res = make()
    await state.start_install("rst", "req", NOW.isoformat())
    await state.set_install("rst", status="Failed")  # a failed install may be reset
    await res.on_request(ResetCluster(request_id="r1", cluster="rst", nodes=["node1"]))
    await res.reconcile("rst")
    await res.on_result(result(commands(sent)[-1]))
    await res.reconcile("rst")
    await res.on_result(result(commands(sent)[-1], "Failed", "static pods still running"))
    outcome = await res.reconcile("rst")
    assert outcome.status == "failed" and "node node1 step reset-node: static pods still running" in outcome.reason
    assert not [s for s, _, _ in sent if s == "bke.v1.cluster.deleted"]
