"""A changed spec carried out by the upgrader, on real Redis and NATS (no agents: their answers
are recorded as the results subscriber records them).

`Applies.on_request` decides a changed controller-manager flag of the seed example (the dispatcher's
status is the one fact given: an installed cluster); the upgrader's own `Upgrades` passes then send
one master's `ReplaceFiles` at a time, carrying only kube-controller-manager.yaml, nothing to the
worker, and at the end the new plan replaces the stored one and the renderer is asked to render it.
While it runs a second apply is refused as busy; a label change runs the labels step alone
(recorded as the install's node-labels phase records it in the lab). A master whose agent rolled
back stops the apply: no later master is sent anything and the stored plan stays."""
from __future__ import annotations

import asyncio
import base64
import io
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client as NatsClient
from redis import asyncio as aioredis
from rich.console import Console

from bke.adapters.bus import get_blob, put_blob
from bke.adapters.bus.handler import typed
from bke.adapters.bus.streams import OBJECT_BUCKET
from bke.core.spec.limits import MAX_SPEC_BYTES
from bke_cli.apply_follow import apply_and_follow
from bke.lab.standins.node_labels import LabNodes
from bke.adapters.cluster_api.node_labels import NodeLabelsWork
from bke.contracts.agent import AgentCommand, CommandResult, StepResult
from bke.contracts.agent_steps import ReplaceFiles
from bke.contracts.apply import APPLY_ACCEPTED, APPLY_CLUSTER, APPLY_REJECTED, ApplyAccepted, ApplyCluster, ApplyRejected
from bke.contracts.render import RENDER_MANIFESTS
from bke.core.plan import plan_spec_text
from bke.adapters.state import PlanCache, RedisPlanStore, plan_digest
from bke.adapters.state.keys.dispatcher import node_labels_key
from bke_upgrader.ops.apply.run import Applies
from bke_upgrader.certs import UpgradeCerts
from bke_upgrader.membership import ApplyMembership
from bke_upgrader.operation import Upgrades
from bke_upgrader.ports import ClusterApi, Commands, Records, RunSettings
from bke_upgrader.renders import Renders
from bke_upgrader.ops.restore.store import RestoreStore
from bke_upgrader.store import UpgradeStore

from ..unit.upgrade_helpers import SEED

pytestmark = pytest.mark.integration
TEXT = Path(SEED).read_text()
CERTS = "      certificates: {keyAlgorithm: ECDSA-P256}\n"
FLAG = CERTS + '      controllerManager:\n        extraArgs: {kube-api-qps: "80"}\n'
LABEL = "role: [node], labels: {tier: gold}}"


def _now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass
class _Installed:  # the one field of the dispatcher's status the apply reads, and no rotation
    status: str = "Succeeded"
    rotation: None = None


class _Facts:
    async def status(self, cluster: str) -> _Installed:
        return _Installed()


class _Labels:
    def __init__(self, work: NodeLabelsWork):
        self.work = work

    async def apply(self, plan) -> str:  # type: ignore[no-untyped-def]
        out = await self.work.run("apply-labels", plan)
        return "" if out.status == "done" else out.reason or out.status


class _Snapshots:
    async def recipient(self) -> str:
        return base64.b64encode(bytes(32)).decode()  # an X25519 public key's form


async def _setup(redis: aioredis.Redis, nc: NatsClient, sent: list[AgentCommand], published: list[str],  # type: ignore[no-untyped-def]
                 bodies: dict[str, list[bytes]] | None = None, text: str = TEXT, **upgrader: Any):
    plan = plan_spec_text(text, "seed").plan
    assert plan is not None
    pj = plan.to_json()
    assert await RedisPlanStore(redis).save(plan, pj, plan_digest(pj), "install-1", _now().isoformat())
    return (plan, *_upgrader(redis, nc, sent, published, bodies, **upgrader))


def _upgrader(redis: aioredis.Redis, nc: NatsClient, sent: list[AgentCommand], published: list[str],  # type: ignore[no-untyped-def]
              bodies: dict[str, list[bytes]] | None = None, clock: Callable[[], float] = time.time,
              answer_timeout_s: float = 1800.0, renders: Renders | None = None):
    """An upgrader's store, runs and applies as app.py wires them (a new call: a restarted one)."""
    store = UpgradeStore(redis)

    async def publish(payload: bytes, subject: str, headers: dict[str, str]) -> None:
        published.append(subject)
        if bodies is not None:
            bodies.setdefault(subject, []).append(payload)
        if subject.endswith(".command"):
            sent.append(AgentCommand.model_validate_json(payload))
        await nc.publish(subject, payload, headers=headers or None)

    async def sign(cmd: AgentCommand) -> bytes:
        return cmd.to_bytes()

    plans = PlanCache(redis)
    upgrades = Upgrades(Records(store, plans, RedisPlanStore(redis), _Facts()),  # type: ignore[arg-type]
                        Commands(publish, sign, renders or Renders(), None, _Snapshots()),  # type: ignore[arg-type]
                        ClusterApi(None, None, _Labels(NodeLabelsWork(redis, LabNodes(), _now))),  # type: ignore[arg-type]
                        RunSettings("apply-test", 30_000, _now),
                        certs=UpgradeCerts(store, publish, answer_timeout_s=answer_timeout_s, now=clock),
                        membership=ApplyMembership(store, publish, answer_timeout_s=answer_timeout_s, now=clock))
    return store, upgrades, Applies(upgrades, plans, RestoreStore(redis), _now)


async def _accepted(applies: Applies, cluster: str, request_id: str, spec: str) -> ApplyAccepted:
    """The apply of `spec`, accepted (the test fails naming the refusal if it is not)."""
    outs = await applies.on_request(ApplyCluster(request_id=request_id, cluster=cluster, spec=spec))
    accepted = outs[0].message
    assert isinstance(accepted, ApplyAccepted), accepted
    return accepted


async def _answer(store: UpgradeStore, cmd: AgentCommand, failed: str = "") -> None:
    steps = [StepResult(id=cmd.steps[0].id, status="Failed", stderr=failed)] if failed else []
    res = CommandResult(command_id=cmd.command_id, cluster=cmd.cluster, node=cmd.node, agent_id="a",
                        status="Failed" if failed else "Succeeded", steps=steps, started_at=_now().isoformat(),
                        finished_at=_now().isoformat())
    # as the results subscriber records the dispatcher's believed answer: this process knows at once
    assert await store.record_if_current(res, steps[0].id if steps else "", failed) == ""


async def test_a_controller_manager_flag_goes_master_by_master_then_replaces_the_plan(
        redis_client: aioredis.Redis, nats_client: NatsClient) -> None:
    sent: list[AgentCommand] = []
    published: list[str] = []
    plan, store, upgrades, applies = await _setup(redis_client, nats_client, sent, published)
    masters = [n.hostname for n in plan.nodes if "master/node" in n.roles]
    req = ApplyCluster(request_id="a1", cluster=plan.cluster, spec=TEXT.replace(CERTS, FLAG))
    outs = await applies.on_request(req)
    assert [o.subject for o in outs][0] == APPLY_ACCEPTED
    accepted = outs[0].message
    assert isinstance(accepted, ApplyAccepted)
    assert [(a.kind, a.host, a.detail) for a in accepted.actions] == [("roll", m, "kube-controller-manager") for m in masters]
    assert [(s.name, s.total) for s in accepted.steps] == [("pre-checks", 0), ("kube-controller-manager", 3)]

    # another apply while this one runs: refused by name
    again = await applies.on_request(ApplyCluster(request_id="a2", cluster=plan.cluster, spec=TEXT.replace(CERTS, FLAG)))
    assert again[0].subject == APPLY_REJECTED
    busy = again[0].message
    assert isinstance(busy, ApplyRejected) and [r.path for r in busy.refusals] == ["Busy"] and "apply a1" in busy.message
    # the apply holds the cluster's one operation slot as an apply: an upgrade's claim names it
    from bke.adapters.state.operation_slot import claim_operation, operation_holder
    held = await operation_holder(redis_client, plan.cluster)
    assert held is not None and (held.kind, held.request_id) == ("apply", "a1")
    assert (await claim_operation(redis_client, plan.cluster, "upgrade", "u9", "t")).refusal(plan.cluster) == \
        f"apply a1 of {plan.cluster} is running: one operation per cluster"

    for i in range(len(masters)):
        await upgrades.reconcile(plan.cluster)
        assert [c.node for c in sent] == masters[:i + 1]  # one master at a time, the next only after an answer
        cmd = sent[-1]
        assert len(cmd.steps) == 1 and isinstance(cmd.steps[0], ReplaceFiles)
        assert [f.path for f in cmd.steps[0].files] == ["/etc/kubernetes/manifests/kube-controller-manager.yaml"]
        assert [p.url for p in cmd.steps[0].probes]  # probed, rolled back by the agent if unhealthy
        await upgrades.reconcile(plan.cluster)  # no answer yet: nothing more is sent
        assert len(sent) == i + 1
        await _answer(store, cmd)
    outcome = await upgrades.reconcile(plan.cluster)
    assert outcome.status == "done", outcome.reason
    run = await store.load(plan.cluster, fresh=True)
    assert run is not None and run.status == "Succeeded", run
    meta = await RedisPlanStore(redis_client).meta(plan.cluster)
    assert meta is not None and meta.digest == accepted.desired_digest  # the new plan, by compare-and-swap
    assert RENDER_MANIFESTS in published
    assert len(sent) == len(masters)  # the worker got nothing
    assert await store.node_versions(plan.cluster) == {}  # no version changed: no node recorded behind or ahead
    assert await operation_holder(redis_client, plan.cluster) is None  # freed at its end

    # a label change: the labels step alone, no command to any node; the install's records first
    assert (await NodeLabelsWork(redis_client, LabNodes(), _now).run("node-labels", plan)).status == "done"
    before = await redis_client.hgetall(node_labels_key(plan.cluster))
    relabel = TEXT.replace(CERTS, FLAG).replace("role: [node]}", LABEL)
    accepted = await _accepted(applies, plan.cluster, "a3", relabel)
    assert [(a.kind, a.host) for a in accepted.actions] == [("set-labels-taints", "node1")]
    assert (await upgrades.reconcile(plan.cluster)).status == "done"
    assert len(sent) == len(masters)
    labels = await redis_client.hgetall(node_labels_key(plan.cluster))
    assert {h for h in labels if labels[h] != before.get(h)} == {"node1"}
    assert json.loads(labels["node1"])["labels"]["tier"] == "gold"


async def test_refusals_by_name_and_nothing_stored(redis_client: aioredis.Redis, nats_client: NatsClient) -> None:
    sent: list[AgentCommand] = []
    plan, store, upgrades, applies = await _setup(redis_client, nats_client, sent, [])
    more = TEXT.replace("spec: {hostname: node1, ip: 127.0.10.4, role: [node]}",
                        "spec: {hostname: node1, ip: 127.0.10.4, role: [node, etcd-event]}")
    # master3 stops being a master while node1 is removed, in one apply: not built
    both = TEXT.replace("hostname: master3, ip: 127.0.10.3, role: [master/node, etcd]",
                        "hostname: master3, ip: 127.0.10.3, role: [node, etcd]")
    both = both.split("---\napiVersion: bke.bocloud.com/v1beta1\nkind: BKENode\nmetadata: {name: seed-node1}")[0]
    assert more != TEXT and both != TEXT and "node1" not in both
    cases = {
        "roles": (both, "NotBuilt", "in the same apply as removing nodes (node1)"),
        "split": (more, "SplitUnchanged", "etcd-events"),
        "versions": (TEXT.replace("kubernetesVersion: v1.33.2", "kubernetesVersion: v1.33.3"), "Versions", "bke upgrade apply"),  # VersionsAlone: its rolls come with it
        "invalid": (TEXT.replace("role: [node]}", "role: [nope]}"), "spec.", "nope"),
        "network": (TEXT.replace(CERTS, CERTS + "      networking: {serviceSubnet: 10.97.0.0/16}\n"), "NetworkUnchanged", "service_subnet"),
    }
    for name, (spec, path, words) in cases.items():
        outs = await applies.on_request(ApplyCluster(request_id=f"r-{name}", cluster=plan.cluster, spec=spec))
        assert [o.subject for o in outs] == [APPLY_REJECTED], name
        rej = outs[0].message
        assert isinstance(rej, ApplyRejected)
        assert any(r.path.startswith(path) for r in rej.refusals), (name, rej)
        assert words in rej.message or any(words in r.message for r in rej.refusals), (name, rej)
    assert await store.load(plan.cluster) is None and sent == []
    # bytes that are no request: answered naming the field, never dead-lettered
    outs = applies.refuse_bytes(b'{"requestId": "x", "cluster": "seed"}')
    assert outs[0].subject == APPLY_REJECTED and "spec" in outs[0].message.message  # type: ignore[union-attr]


async def test_a_rolled_back_master_stops_the_apply_and_keeps_the_stored_plan(
        redis_client: aioredis.Redis, nats_client: NatsClient) -> None:
    sent: list[AgentCommand] = []
    plan, store, upgrades, applies = await _setup(redis_client, nats_client, sent, [])
    digest = (await RedisPlanStore(redis_client).meta(plan.cluster)).digest  # type: ignore[union-attr]
    outs = await applies.on_request(ApplyCluster(request_id="b1", cluster=plan.cluster, spec=TEXT.replace(CERTS, FLAG)))
    assert outs[0].subject == APPLY_ACCEPTED
    await upgrades.reconcile(plan.cluster)
    await _answer(store, sent[-1])
    await upgrades.reconcile(plan.cluster)
    assert [c.node for c in sent] == ["master1", "master2"]
    # master2's new controller-manager never came up healthy: the agent put the old manifest back
    await _answer(store, sent[-1], failed="rolled back: kube-controller-manager not healthy within 180s")
    outcome = await upgrades.reconcile(plan.cluster)
    assert outcome.status == "failed"
    assert "master2 rolled back" in outcome.reason, outcome.reason
    assert [c.node for c in sent] == ["master1", "master2"]  # master3 is never sent anything
    meta = await RedisPlanStore(redis_client).meta(plan.cluster)
    assert meta is not None and meta.digest == digest  # the stored plan is still the one the cluster runs
    run = await store.load(plan.cluster, fresh=True)
    assert run is not None and run.status == "Failed" and run.failed[0].status == "RolledBack"


async def _pass(upgrades: Upgrades, cluster: str) -> object:
    """One pass; a step waiting for the dispatcher's answer is the runner's TemporaryError."""
    from bke.core.errors import TemporaryError

    try:
        return await upgrades.reconcile(cluster)
    except TemporaryError as exc:
        return exc


WORKER2 = ("---\napiVersion: bke.bocloud.com/v1beta1\nkind: BKENode\nmetadata: {name: seed-node2}\n"
           "spec: {hostname: node2, ip: 127.0.10.5, role: [node]}\n")


async def test_a_worker_leaves_and_another_joins_through_the_dispatcher_inside_the_apply(
        redis_client: aioredis.Redis, nats_client: NatsClient) -> None:
    """node1 out, node2 in: RemoveNodes while the stored plan still names node1, then the new
    plan swapped in and JoinNodes with its digest, both `partOf` the apply (inside its slot),
    each waited for by its `finished`; no agent command from the upgrader; a redelivered or
    foreign `finished` changes nothing; the slot is the apply's throughout and freed at the end."""
    from bke.contracts.membership import (
        JOIN_NODES, REMOVE_NODES, JoinNodes, JoinNodesFinished, MembershipNode, RemoveNodes, RemoveNodesFinished,
    )
    from bke.adapters.state.operation_slot import operation_holder

    sent: list[AgentCommand] = []
    bodies: dict[str, list[bytes]] = {}
    plan, store, upgrades, applies = await _setup(redis_client, nats_client, sent, [], bodies)
    before = (await RedisPlanStore(redis_client).meta(plan.cluster)).digest  # type: ignore[union-attr]
    docs = TEXT.split("\n---\n")
    spec = "\n---\n".join(d for d in docs if "hostname: node1" not in d) + "\n" + WORKER2
    accepted = await _accepted(applies, plan.cluster, "m1", spec)
    assert [(s.name, s.total) for s in accepted.steps] == [("pre-checks", 0), ("remove-nodes", 1), ("join-nodes", 1)]

    await _pass(upgrades, plan.cluster)
    [raw] = bodies[REMOVE_NODES]
    removal = RemoveNodes.model_validate_json(raw)
    assert (removal.nodes, removal.part_of) == (["node1"], "m1")
    assert JOIN_NODES not in bodies and (await RedisPlanStore(redis_client).meta(plan.cluster)).digest == before
    await _pass(upgrades, plan.cluster)  # no answer: nothing more
    assert len(bodies[REMOVE_NODES]) == 2 and JOIN_NODES not in bodies  # asked again, the same id (deduplicated)
    assert RemoveNodes.model_validate_json(bodies[REMOVE_NODES][1]).request_id == removal.request_id

    # a finished of another request is not this run's answer
    await upgrades.membership.on_finished(RemoveNodesFinished(request_id="other", cluster=plan.cluster,
                                                              status="Failed", reason="x", at="t"))
    await _pass(upgrades, plan.cluster)
    assert JOIN_NODES not in bodies
    await upgrades.membership.on_finished(RemoveNodesFinished(
        request_id=removal.request_id, cluster=plan.cluster, status="Succeeded", at="t",
        nodes=[MembershipNode(hostname="node1", status="Succeeded")], revoke_identities=["agent-seed-node1"]))
    await _pass(upgrades, plan.cluster)
    [raw] = bodies[JOIN_NODES]
    join = JoinNodes.model_validate_json(raw)
    meta = await RedisPlanStore(redis_client).meta(plan.cluster)
    assert meta is not None and meta.digest == accepted.desired_digest == join.plan_digest  # swapped in first
    assert (join.nodes, join.part_of) == (["node2"], "m1")
    held = await operation_holder(redis_client, plan.cluster)
    assert held is not None and (held.kind, held.request_id) == ("apply", "m1")

    await upgrades.membership.on_finished(JoinNodesFinished(
        request_id=join.request_id, cluster=plan.cluster, status="Succeeded", at="t",
        nodes=[MembershipNode(hostname="node2", status="Succeeded")]))
    outcome = await _pass(upgrades, plan.cluster)
    assert outcome.status == "done", outcome.reason
    run = await store.load(plan.cluster, fresh=True)
    assert run is not None and run.status == "Succeeded"
    assert [(s.name, s.done) for s in run.steps] == [("pre-checks", 0), ("remove-nodes", 1), ("join-nodes", 1)]
    assert sent == []  # every node command was the dispatcher's
    assert await operation_holder(redis_client, plan.cluster) is None


async def test_a_join_the_dispatcher_refuses_fails_the_apply_with_its_reason(
        redis_client: aioredis.Redis, nats_client: NatsClient) -> None:
    from bke.contracts.membership import JOIN_NODES, JoinNodes, JoinNodesFinished

    sent: list[AgentCommand] = []
    bodies: dict[str, list[bytes]] = {}
    plan, store, upgrades, applies = await _setup(redis_client, nats_client, sent, [], bodies)
    outs = await applies.on_request(ApplyCluster(request_id="m2", cluster=plan.cluster, spec=TEXT + WORKER2))
    assert outs[0].subject == APPLY_ACCEPTED
    await _pass(upgrades, plan.cluster)
    join = JoinNodes.model_validate_json(bodies[JOIN_NODES][0])
    await upgrades.membership.on_finished(JoinNodesFinished(request_id=join.request_id, cluster=plan.cluster,
                                                            status="Failed", reason="node node2 phase certs: boom", at="t"))
    meta = await RedisPlanStore(redis_client).meta(plan.cluster)
    assert meta is not None and meta.digest == join.plan_digest  # swapped in for the join
    outcome = await _pass(upgrades, plan.cluster)
    assert outcome.status == "failed" and "node node2 phase certs: boom" in outcome.reason, outcome.reason
    run = await store.load(plan.cluster, fresh=True)
    assert run is not None and run.status == "Failed"
    # the plan it started from is back: applying the spec again sees node2 to join again
    meta = await RedisPlanStore(redis_client).meta(plan.cluster)
    assert meta is not None and meta.digest == run.plan_digest != join.plan_digest
    assert "node2" not in {n.hostname for n in (await PlanCache(redis_client).load(plan.cluster)).nodes}
    again = await applies.on_request(ApplyCluster(request_id="m3", cluster=plan.cluster, spec=TEXT + WORKER2))
    assert again[0].subject == APPLY_ACCEPTED
    assert [a.kind for a in again[0].message.actions] == ["join"]  # type: ignore[union-attr]


async def _drive(redis: aioredis.Redis, cluster: str, upgrades: Upgrades, store: UpgradeStore,  # type: ignore[no-untyped-def]
                 sent: list[AgentCommand], bodies: dict[str, list[bytes]], accepted: ApplyAccepted):
    """Pass after pass until the run ends, answering every agent command and every JoinNodes
    (Succeeded) as it comes: (outcome, what was seen in order, the JoinNodes requests)."""
    from bke.contracts.agent_steps import EtcdMemberAdd, EtcdMemberPromote, EtcdSnapshot, WaitHealth
    from bke.contracts.membership import JOIN_NODES, JoinNodes, JoinNodesFinished, MembershipNode

    seen: list[tuple[str, str]] = []
    joins: list[JoinNodes] = []
    answered, joined, join_ids = 0, 0, set()
    outcome: object = None
    for _ in range(60):
        outcome = await _pass(upgrades, cluster)
        if getattr(outcome, "status", "") in ("done", "failed"):
            break
        for cmd in sent[answered:]:
            kinds = {type(st) for st in cmd.steps}
            what = ("snapshot" if EtcdSnapshot in kinds else "add" if EtcdMemberAdd in kinds else
                    "promote" if EtcdMemberPromote in kinds else "health" if kinds == {WaitHealth} else
                    "roll:" + ",".join(f.path.rsplit("/", 1)[1] for st in cmd.steps if isinstance(st, ReplaceFiles)
                                       for f in st.files))
            seen.append((what, cmd.node))
            await _answer(store, cmd)
        answered = len(sent)
        for raw in bodies.get(JOIN_NODES, [])[joined:]:
            join = JoinNodes.model_validate_json(raw)
            if join.request_id in join_ids:  # asked again while unanswered: the same request
                continue
            join_ids.add(join.request_id)
            joins.append(join)
            assert join.part_of == accepted.request_id and join.etcd_joins
            seen.append((f"join:{join.etcd_joins[0].initial_cluster.count('=')}", join.nodes[0]))
            meta = await RedisPlanStore(redis).meta(cluster)
            assert meta is not None and meta.digest == join.plan_digest == accepted.desired_digest
            await upgrades.membership.on_finished(JoinNodesFinished(
                request_id=join.request_id, cluster=cluster, status="Succeeded", at="t",
                nodes=[MembershipNode(hostname=join.nodes[0], status="Succeeded")]))
        joined = len(bodies.get(JOIN_NODES, []))
    return outcome, seen, joins


async def test_etcd_events_grown_from_one_to_three_member_by_member_then_rolled(
        redis_client: aioredis.Redis, nats_client: NatsClient) -> None:
    """1 -> 3 members: a snapshot, then per new member its learner added on the member that
    stays, its node joined by the dispatcher (with the member list it starts with, the new plan
    swapped in first), promoted, every member's health; then the old member's manifest and the
    apiserver (its --etcd-servers-overrides) rolled against the plan the run started from."""
    from tests.unit.planner.test_apply_run import _grow_spec

    sent: list[AgentCommand] = []
    bodies: dict[str, list[bytes]] = {}
    one, three = _grow_spec(("events1",)), _grow_spec(("events1", "events2", "events3"))
    plan, store, upgrades, applies = await _setup(redis_client, nats_client, sent, [], bodies, text=one)
    accepted = await _accepted(applies, plan.cluster, "g1", three)
    outcome, seen, joins = await _drive(redis_client, plan.cluster, upgrades, store, sent, bodies, accepted)
    assert all(len(j.etcd_joins or []) == 1 for j in joins)
    assert getattr(outcome, "status", "") == "done", outcome
    assert seen == [
        ("snapshot", "events1"),
        ("add", "events1"), ("join:2", "events2"), ("promote", "events1"), ("health", "events1"), ("health", "events2"),
        ("add", "events1"), ("join:3", "events3"), ("promote", "events1"),
        ("health", "events1"), ("health", "events2"), ("health", "events3"),
        ("roll:etcd-events.yaml", "events1"), ("roll:kube-apiserver.yaml", "m1"),
    ], seen
    run = await store.load(plan.cluster, fresh=True)
    assert run is not None and run.status == "Succeeded"


async def test_a_scheduler_moved_to_another_master_starts_there_first_then_leaves(
        redis_client: aioredis.Redis, nats_client: NatsClient) -> None:
    """A role change that moves kube-scheduler from master1 to master3: master3's ReplaceFiles
    (the new manifest, probed) first, then master1's RemoveFile of its manifest (the kubelet
    stops the pod), one at a time; nothing to master2 or the worker."""
    from bke.contracts.agent_steps import RemoveFile
    from tests.unit.planner.test_apply_run import _roles

    sent: list[AgentCommand] = []
    plan, store, upgrades, applies = await _setup(redis_client, nats_client, sent, [],
                                                  text=_roles(TEXT, master1=", scheduler"))
    outs = await applies.on_request(ApplyCluster(request_id="s1", cluster=plan.cluster,
                                                 spec=_roles(TEXT, master3=", scheduler")))
    assert outs[0].subject == APPLY_ACCEPTED, outs[0].message
    for _ in range(10):
        outcome = await _pass(upgrades, plan.cluster)
        if getattr(outcome, "status", "") in ("done", "failed"):
            break
        if sent and not (await store.results(plan.cluster, [sent[-1].command_id])):
            await _answer(store, sent[-1])
    assert getattr(outcome, "status", "") == "done", outcome
    assert [c.node for c in sent] == ["master3", "master1"]
    first, second = sent[0].steps, sent[1].steps
    assert isinstance(first[0], ReplaceFiles)
    assert [f.path for f in first[0].files] == ["/etc/kubernetes/manifests/kube-scheduler.yaml"]
    assert [(type(s), s.path) for s in second] == [(RemoveFile, "/etc/kubernetes/manifests/kube-scheduler.yaml")]


SANS = CERTS + "      apiServer: {certSANs: [api.seed.example.com]}\n"


async def test_new_apiserver_names_store_the_plan_reissue_then_ride_with_each_apiserver_roll(
        redis_client: aioredis.Redis, nats_client: NatsClient) -> None:
    """certSANs added: the certificates step stores the run's plan (the certs service issues the
    stored plan's names) and asks `IssueCerts` (purpose apply) once, sending nothing to a node
    until the answer; then each master's `ReplaceFiles` carries its new manifest and its
    re-issued apiserver certificate and key from the bundle the certs service sealed to it. A
    failed re-issue fails the run and puts the plan it started from back."""
    from bke.contracts.certs import ISSUE_CERTS, CertsFailed, CertsIssued, IssueCerts
    from bke.adapters.state.nodefiles import RedisNodeFiles
    from bke_upgrader.certs import renewal_id

    from .test_upgrader_certs import _sealed_set

    sent: list[AgentCommand] = []
    bodies: dict[str, list[bytes]] = {}
    plan, store, upgrades, applies = await _setup(redis_client, nats_client, sent, [], bodies)
    before = (await RedisPlanStore(redis_client).meta(plan.cluster)).digest  # type: ignore[union-attr]
    accepted = await _accepted(applies, plan.cluster, "s1", TEXT.replace(CERTS, SANS))
    assert [(s.name, s.total) for s in accepted.steps] == [("pre-checks", 0), ("certificates", 0), ("kube-apiserver", 3)]

    await _pass(upgrades, plan.cluster)
    await _pass(upgrades, plan.cluster)  # no answer yet: asked again under the same id, nothing sent
    asks = [IssueCerts.model_validate_json(b) for b in bodies[ISSUE_CERTS]]
    assert {(a.request_id, a.purpose) for a in asks} == {(renewal_id("s1"), "apply")} and sent == []
    meta = await RedisPlanStore(redis_client).meta(plan.cluster)
    assert meta is not None and meta.digest == accepted.desired_digest  # stored before asking

    # the certs service's answer (bke_certs: ensure on the stored plan re-issues the three
    # apiserver certificates, tests/unit/core/pki/test_pki_ensure.py) and the bundles it re-sealed
    new = (await PlanCache(redis_client).load(plan.cluster))
    masters = ["master1", "master2", "master3"]
    await RedisNodeFiles(redis_client).put_many(plan.cluster, "certs", {m: _sealed_set(new, m) for m in masters})
    await upgrades.certs.on_issued(CertsIssued(request_id="install-1", cluster=plan.cluster, issued=[], reissued=[],
                                               reused=0, changed_nodes=0, plan_digest=meta.digest))  # not this run's
    await _pass(upgrades, plan.cluster)
    assert sent == []
    await upgrades.certs.on_issued(CertsIssued(request_id=renewal_id("s1"), cluster=plan.cluster, issued=[],
                                               reissued=[f"apiserver@{m}" for m in masters], reused=62,
                                               changed_nodes=3, plan_digest=meta.digest))
    for i in range(len(masters)):
        await _pass(upgrades, plan.cluster)
        assert [c.node for c in sent] == masters[:i + 1]
        [step] = sent[-1].steps
        assert isinstance(step, ReplaceFiles)
        paths = {f.path: f for f in step.files}
        assert set(paths) == {"/etc/kubernetes/manifests/kube-apiserver.yaml", "/etc/kubernetes/pki/apiserver.crt",
                              "/etc/kubernetes/pki/apiserver.key"}
        assert paths["/etc/kubernetes/pki/apiserver.key"].sealed_b64 and not paths["/etc/kubernetes/pki/apiserver.key"].content_b64
        await _answer(store, sent[-1])
    outcome = await _pass(upgrades, plan.cluster)
    assert outcome.status == "done", outcome.reason
    run = await store.load(plan.cluster, fresh=True)
    assert run is not None and run.status == "Succeeded"
    assert (await RedisPlanStore(redis_client).meta(plan.cluster)).digest == accepted.desired_digest  # type: ignore[union-attr]

    # the same change on the first plan again, refused by the certs service: failed, plan put back
    assert await RedisPlanStore(redis_client).upgrade(plan, plan.to_json(), before, accepted.desired_digest, "undo",
                                                      _now().isoformat())
    outs = await applies.on_request(ApplyCluster(request_id="s2", cluster=plan.cluster, spec=TEXT.replace(CERTS, SANS)))
    assert outs[0].subject == APPLY_ACCEPTED
    await _pass(upgrades, plan.cluster)
    await upgrades.certs.on_failed(CertsFailed(request_id=renewal_id("s2"), cluster=plan.cluster, kind="operational",
                                               reason="node master2: its agent's sealing key is unusable: x"))
    outcome = await _pass(upgrades, plan.cluster)
    assert outcome.status == "failed" and "certificate re-issue failed: node master2" in outcome.reason, outcome.reason
    assert (await RedisPlanStore(redis_client).meta(plan.cluster)).digest == before  # type: ignore[union-attr]
    assert len(sent) == 3  # nothing more sent


async def test_a_master_joining_a_vip_cluster_rolls_each_load_balancer_first_vrrp_password_sealed(
        redis_client: aioredis.Redis, nats_client: NatsClient) -> None:
    """The split example (a VIP endpoint: haproxy and keepalived on its five masters) gains a
    master: each master, one at a time, gets its new haproxy.cfg (a sixth backend) and
    keepalived.conf (a sixth peer) with both manifests (their config digests changed), the
    keepalived.conf sealed to that master's provisioned agent key and holding the cluster's VRRP
    password from the renderer's store; only then is the new master joined by the dispatcher."""
    from bke.contracts.agent import ProvisionAgent
    from bke.contracts.membership import JOIN_NODES, JoinNodes
    from bke.core.secrets.sealing import generate_agent_key, open_sealed, public_key_to_raw
    from bke.adapters.state.keys.certs import provisioned_agents_key
    from bke.adapters.state.keys.renderer import vrrp_password_key
    from tests.unit.planner.test_apply_run import SPLIT
    from tests.unit.dispatcher.test_load_balancer_roll import M6

    sent: list[AgentCommand] = []
    bodies: dict[str, list[bytes]] = {}

    # as bke_upgrader.wiring.adapters asks for it: over the bus, answered as the renderer answers, sealed
    from bke.adapters.state.record_keys import RecordKeys
    from bke.contracts.vrrp_password import VRRP_PASSWORD_GET
    from bke_renderer.store_redis import RedisRenderStore
    from bke_renderer.vrrp_answer import vrrp_password_answer
    from bke_upgrader.vrrp_password import VrrpPasswordClient
    answer = vrrp_password_answer(RedisRenderStore(redis_client, RecordKeys(redis_client, {})).stored_vrrp_password)

    async def renderer(msg: Any) -> None:
        await msg.respond(await answer(msg.subject, msg.data))

    await nats_client.subscribe(VRRP_PASSWORD_GET, cb=renderer)

    async def request(subject: str, payload: bytes, timeout: float) -> bytes:
        return (await nats_client.request(subject, payload, timeout=timeout)).data

    password = VrrpPasswordClient(request, 10.0)
    plan, store, upgrades, applies = await _setup(redis_client, nats_client, sent, [], bodies, text=SPLIT,
                                                  renders=Renders(password))
    await redis_client.set(vrrp_password_key(plan.cluster), "Vr7pQ2xZ")
    masters = [n.hostname for n in plan.nodes_running("keepalived")]
    keys = {m: generate_agent_key() for m in masters}
    for m, k in keys.items():
        await redis_client.hset(provisioned_agents_key(plan.cluster), m, ProvisionAgent(
            cluster=plan.cluster, node=m, agent_id=f"agent-{m}",
            seal_public_key_b64=base64.b64encode(public_key_to_raw(k.public_key())).decode()).to_bytes())
    accepted = await _accepted(applies, plan.cluster, "lb1", SPLIT + M6)
    assert [(s.name, s.total) for s in accepted.steps] == [("pre-checks", 0), ("load-balancer", 5), ("join-nodes", 1)]

    for i, m in enumerate(masters):
        await _pass(upgrades, plan.cluster)
        assert [c.node for c in sent] == masters[:i + 1] and JOIN_NODES not in bodies
        (step,) = sent[-1].steps
        assert isinstance(step, ReplaceFiles)
        files = {f.path: f for f in step.files}
        assert set(files) == {"/etc/haproxy/haproxy.cfg", "/etc/keepalived/keepalived.conf",
                              "/etc/kubernetes/manifests/haproxy.yaml", "/etc/kubernetes/manifests/keepalived.yaml"}
        conf = files["/etc/keepalived/keepalived.conf"]
        assert conf.content_b64 is None
        text = open_sealed(keys[m], base64.b64decode(conf.sealed_b64 or "")).decode()
        assert "auth_pass Vr7pQ2xZ" in text and "127.0.20.6" in text
        assert b"Vr7pQ2xZ" not in sent[-1].to_bytes()  # never in clear on the bus
        await _pass(upgrades, plan.cluster)
        assert len(sent) == i + 1  # the next master only after this one answered
        await _answer(store, sent[-1])
    await _pass(upgrades, plan.cluster)
    [raw] = bodies[JOIN_NODES]
    assert JoinNodes.model_validate_json(raw).nodes == ["m6"]
    assert len(sent) == len(masters)


async def test_a_node_joining_two_etcd_clusters_is_joined_once_with_its_start_in_each(
        redis_client: aioredis.Redis, nats_client: NatsClient) -> None:
    """Two new nodes, each a member of etcd-data and etcd-events: each added as a learner in
    both, one JoinNodes naming its start in both (each with that cluster's member list), then
    promoted and checked in each; the dispatcher's join renders and starts both members."""
    from tests.unit.planner.test_apply_run import TWO_JOINT, _grow_spec

    sent: list[AgentCommand] = []
    bodies: dict[str, list[bytes]] = {}
    one = _grow_spec(("events1",))
    plan, store, upgrades, applies = await _setup(redis_client, nats_client, sent, [], bodies, text=one)
    accepted = await _accepted(applies, plan.cluster, "j2", one + TWO_JOINT)
    outcome, seen, joins = await _drive(redis_client, plan.cluster, upgrades, store, sent, bodies, accepted)
    assert getattr(outcome, "status", "") == "done", outcome
    assert [(j.nodes, [(e.etcd_cluster, e.member, e.initial_cluster.count("=")) for e in j.etcd_joins or []])
            for j in joins] == [(["x1"], [("etcd-data", "x1", 2), ("etcd-events", "x1", 2)]),
                                (["x2"], [("etcd-data", "x2", 3), ("etcd-events", "x2", 3)])]
    members = [w for w in seen if not w[0].startswith(("snapshot", "roll"))]
    assert members == [
        ("add", "etcd1"), ("add", "events1"), ("join:2", "x1"),
        ("promote", "etcd1"), ("health", "etcd1"), ("health", "x1"), ("promote", "events1"), ("health", "events1"), ("health", "x1"),
        ("add", "etcd1"), ("add", "events1"), ("join:3", "x2"),
        ("promote", "etcd1"), ("health", "etcd1"), ("health", "x1"), ("health", "x2"),
        ("promote", "events1"), ("health", "events1"), ("health", "x1"), ("health", "x2"),
    ], seen


async def test_a_spec_over_one_mib_travels_by_reference_and_the_dry_run_is_answered(
        redis_client: aioredis.Redis, nats_client: NatsClient, nats_url: str) -> None:
    # the CLI's `bke apply` request, read by the upgrader's handler as app.py wires it
    sent: list[AgentCommand] = []
    plan, store, upgrades, applies = await _setup(redis_client, nats_client, sent, [])
    js = nats_client.jetstream()
    applies.fetch_blob = lambda ref: get_blob(js, ref, limit=MAX_SPEC_BYTES)
    pad = "# a large cluster's spec: thousands of BKENode documents\n"
    big = TEXT.replace(CERTS, FLAG) + pad * (1_200_000 // len(pad))
    assert len(big) > 1024 * 1024
    handler = typed(ApplyCluster, applies.on_request,
                    lambda payload, subject, headers: nats_client.publish(subject, payload, headers=headers or None),
                    refuse=applies.refuse_bytes)
    requests = await nats_client.subscribe(APPLY_CLUSTER)
    out = io.StringIO()
    follow = asyncio.create_task(apply_and_follow(nats_url, big.encode(), plan.cluster, 60, Console(file=out),
                                                  dry_run=True))
    msg = await requests.next_msg(timeout=30)
    req = ApplyCluster.model_validate_json(msg.data)
    assert req.spec is None and req.spec_ref and len(msg.data) < 4096
    await handler(msg.data)
    assert await asyncio.wait_for(follow, 30) == 0
    assert "the changed spec is accepted" in out.getvalue() and "dry run" in out.getvalue(), out.getvalue()
    assert await store.load(plan.cluster) is None and sent == []  # a dry run starts nothing

    # the reference gone, or larger than the limit: refused naming specRef, nothing started
    outs = await applies.on_request(ApplyCluster(request_id="gone", cluster=plan.cluster,
                                                 spec_ref=f"{OBJECT_BUCKET}/specs/no-such.yaml"))
    assert outs[0].subject == APPLY_REJECTED
    assert "specRef" in outs[0].message.message and "not found" in outs[0].message.message  # type: ignore[attr-defined]
    applies.fetch_blob = lambda ref: get_blob(js, ref, limit=64 * 1024)
    ref = await put_blob(js, OBJECT_BUCKET, "specs/apply-too-big.yaml", big.encode())
    outs = await applies.on_request(ApplyCluster(request_id="big", cluster=plan.cluster, spec_ref=ref, dry_run=True))
    assert outs[0].subject == APPLY_REJECTED
    assert f"the limit is {64 * 1024}" in outs[0].message.message  # type: ignore[attr-defined]
    assert await store.load(plan.cluster) is None


class _Clock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


async def test_a_dispatcher_that_never_answers_fails_the_join_after_the_deadline_also_across_a_restart(
        redis_client: aioredis.Redis, nats_client: NatsClient) -> None:
    """The join is asked again every pass until the deadline (60 s here), counted from the first
    ask and kept in the run record: an upgrader started anew past it fails the step naming the
    dispatcher and what to do; the plan the run started from is put back."""
    from bke.contracts.membership import JOIN_NODES

    clock = _Clock()
    bodies: dict[str, list[bytes]] = {}
    plan, store, upgrades, applies = await _setup(redis_client, nats_client, [], [], bodies, clock=clock,
                                                  answer_timeout_s=60)
    outs = await applies.on_request(ApplyCluster(request_id="d1", cluster=plan.cluster, spec=TEXT + WORKER2))
    assert outs[0].subject == APPLY_ACCEPTED
    await _pass(upgrades, plan.cluster)
    assert len(bodies[JOIN_NODES]) == 1
    run = await UpgradeStore(redis_client).load(plan.cluster, fresh=True)
    assert run is not None and [s.sent_at for s in run.steps if s.name == "join-nodes"] == [clock.t]  # in the record
    clock.t += 59
    await _pass(upgrades, plan.cluster)
    assert len(bodies[JOIN_NODES]) == 2  # asked again, not failed yet

    clock.t += 2  # past the deadline, in an upgrader that did not ask first (a restart)
    store, upgrades, _ = _upgrader(redis_client, nats_client, [], [], bodies, clock=clock, answer_timeout_s=60)
    outcome = await _pass(upgrades, plan.cluster)
    assert getattr(outcome, "status", None) == "failed", outcome
    reason = outcome.reason  # type: ignore[attr-defined]
    assert "the dispatcher did not answer the join-nodes request" in reason and "within 61s" in reason, reason
    assert "bke-dispatcher running" in reason and "apply the spec again" in reason
    assert len(bodies[JOIN_NODES]) == 2  # not asked again once past the deadline
    run = await store.load(plan.cluster, fresh=True)
    assert run is not None and run.status == "Failed"
    assert (await RedisPlanStore(redis_client).meta(plan.cluster)).digest == run.plan_digest  # type: ignore[union-attr]


async def test_a_certs_service_that_never_answers_fails_the_reissue_after_the_deadline(
        redis_client: aioredis.Redis, nats_client: NatsClient) -> None:
    from bke.contracts.certs import ISSUE_CERTS

    clock = _Clock()
    bodies: dict[str, list[bytes]] = {}
    sent: list[AgentCommand] = []
    plan, store, upgrades, applies = await _setup(redis_client, nats_client, sent, [], bodies, clock=clock,
                                                  answer_timeout_s=30)
    outs = await applies.on_request(ApplyCluster(request_id="d2", cluster=plan.cluster, spec=TEXT.replace(CERTS, SANS)))
    assert outs[0].subject == APPLY_ACCEPTED
    await _pass(upgrades, plan.cluster)
    clock.t += 29
    await _pass(upgrades, plan.cluster)
    assert len(bodies[ISSUE_CERTS]) == 2
    clock.t += 1
    outcome = await _pass(upgrades, plan.cluster)
    assert getattr(outcome, "status", None) == "failed", outcome
    reason = outcome.reason  # type: ignore[attr-defined]
    assert "the certs service did not answer the certificate re-issue request" in reason and "bke-certs" in reason, reason
    assert len(bodies[ISSUE_CERTS]) == 2 and sent == []  # nothing sent to a node


async def test_a_worker_becoming_a_master_joins_again_naming_what_it_runs_now(
        redis_client: aioredis.Redis, nats_client: NatsClient) -> None:
    """node1 (a worker) -> master/node: no roll of its files, the labels step, then one
    JoinNodes of node1 (the new plan swapped in first) with `rejoin` naming what it runs now,
    so that the dispatcher's join leaves it and checks only the new parts' ports."""
    from bke.contracts.membership import JOIN_NODES, JoinNodes, JoinNodesFinished, MembershipNode

    sent: list[AgentCommand] = []
    bodies: dict[str, list[bytes]] = {}
    plan, store, upgrades, applies = await _setup(redis_client, nats_client, sent, [], bodies)
    spec = TEXT.replace("hostname: node1, ip: 127.0.10.4, role: [node]}", "hostname: node1, ip: 127.0.10.4, role: [master/node]}")
    accepted = await _accepted(applies, plan.cluster, "p1", spec)
    assert [(s.name, s.total) for s in accepted.steps] == [("pre-checks", 0), ("labels", 0), ("join-nodes", 1)]
    await _pass(upgrades, plan.cluster)
    [raw] = bodies[JOIN_NODES]
    join = JoinNodes.model_validate_json(raw)
    assert join.nodes == ["node1"] and join.part_of == "p1" and join.plan_digest == accepted.desired_digest
    assert [(r.hostname, r.running) for r in join.rejoin or []] == [("node1", ["containerd", "kubelet", "kube-proxy"])]
    await upgrades.membership.on_finished(JoinNodesFinished(
        request_id=join.request_id, cluster=plan.cluster, status="Succeeded", at="t",
        nodes=[MembershipNode(hostname="node1", status="Succeeded")]))
    outcome = await _pass(upgrades, plan.cluster)
    assert getattr(outcome, "status", "") == "done", outcome
    assert sent == []  # every command to node1 was the dispatcher's join
