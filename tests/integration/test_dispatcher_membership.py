"""The dispatcher's join and removal adapters against the real Redis of the session fixture,
called as plain functions (the bus is the e2e test's job): a join refused for a plan that is not
the stored one; otherwise it asks the renderer and certs once, waits for the new nodes' bundles,
sends each new node its phases one at a time with fixed ids and sends nothing to any other node,
labels the new nodes, and publishes `finished` once; a resumed dispatcher carries on. A
removal drains and deletes (recorded), resets, forgets the node's records, names its identity."""
from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
import typer
from redis.asyncio import Redis
from rich.console import Console

from bke.lab.standins.checksums import LabChecksums
from bke.contracts.agent import AgentCommand, CommandResult, StepResult
from bke.contracts.certs import CertsIssued
from bke.contracts.membership import JoinNodes, JoinNodesFinished, RemoveNodes, RemoveNodesFinished
from bke.contracts.render import ManifestsRendered, RenderFailed
from bke.contracts.status import ClusterStatus, GetStatus
from bke.lab.standins.drain import LabDrainer
from bke.core.plan import plan_spec_text
from bke.adapters.state import PlanCache, RedisPlanStore, plan_digest
from bke.adapters.state.keys.dispatcher import join_key, removal_api_key, removal_key
from bke.adapters.state.nodefiles import RedisNodeFiles
from bke.core.state.nodefiles import file_from_bytes
from bke_cli.membership_cmd import _exit as membership_exit
from bke_cli.membership_cmd import refused
from bke_dispatcher.ops.join.run import Joins, JoinStore
from bke_dispatcher.ops.membership.gates import Busy
from bke.lab.standins.node_labels import LabNodes
from bke_dispatcher.ops.removal.run import Removals, RemovalStore
from bke_dispatcher.state import DispatcherState
from bke_dispatcher.status import StatusReader
from tests.trust_helpers import signed

pytestmark = pytest.mark.integration
NOW = datetime(2026, 6, 1, tzinfo=timezone.utc)
TEXT = open("examples/seed-3m1w.yaml").read().replace("name: seed", "name: mbr")
EXTRA = """
---
apiVersion: bke.bocloud.com/v1beta1
kind: BKENode
metadata: {name: mbr-node2}
spec: {hostname: node2, ip: 127.0.10.5, role: [node]}
"""
PLAN = plan_spec_text(TEXT + EXTRA).plan
PJ = PLAN.to_json()
DIGEST = plan_digest(PJ)


def result(cmd: AgentCommand, status: str = "Succeeded") -> CommandResult:
    step = StepResult(id=cmd.steps[-1].id if cmd.steps else "x", status=status, stderr="boom" if status == "Failed" else "")
    return CommandResult(command_id=cmd.command_id, cluster=cmd.cluster, node=cmd.node, agent_id="a", status=status,
                         steps=[step], started_at="t", finished_at="t")


@pytest.fixture
async def wired(redis_url, redis_client):
    r = Redis.from_url(redis_url)
    await RedisPlanStore(r).save(PLAN, PJ, DIGEST, "req", NOW.isoformat())
    state = DispatcherState(r)
    await state.start_install("mbr", "req", NOW.isoformat(), DIGEST)
    await state.set_install("mbr", status="Succeeded")
    files = RedisNodeFiles(r)
    # what the renderer and certs service store for node2 (the adapters only read them)
    await files.put_many("mbr", "render", {"node2": [file_from_bytes("/var/lib/kubelet/config.yaml", b"x")]})
    await files.put_many("mbr", "certs", {"node2": [file_from_bytes("/etc/kubernetes/pki/ca.crt", b"c")]})
    sent: list[tuple[str, bytes, dict[str, str]]] = []
    kicks: list[str] = []

    async def publish(body: bytes, subject: str, headers: dict[str, str]) -> None:
        sent.append((subject, body, headers))

    async def not_paused(cluster: str) -> bool:
        return False

    async def idle(cluster: str) -> None:
        return None

    async def sign(cmd: AgentCommand) -> AgentCommand:
        return signed(cmd)

    def joins(now: datetime = NOW) -> Joins:  # a restarted dispatcher is a new object on the same Redis
        store = JoinStore(r)
        return Joins(store, state, PlanCache(r), files, LabChecksums(), LabNodes(), idle, not_paused, publish,
                     lambda: now, "me", kick=kicks.append, sign=sign, agents_deadline_s=900.0)

    def removals() -> Removals:
        store = RemovalStore(r)
        return Removals(store, state, PlanCache(r), LabDrainer(r, lambda: NOW, removal_api_key), idle, not_paused,
                        publish, lambda: NOW, "me", kick=kicks.append, sign=sign)

    try:
        yield joins, removals, state, r, sent
    finally:
        await r.aclose()


def commands(sent) -> list[AgentCommand]:
    return [AgentCommand.model_validate_json(b) for s, b, _ in sent if s.endswith(".command")]


async def test_a_join_for_another_plan_is_refused_and_answered(wired):
    joins, _, _, _, sent = wired
    [out] = await joins().on_request(JoinNodes(request_id="j0", cluster="mbr", plan_digest="0" * 64, nodes=["node2"]))
    assert out.subject == "bke.v1.join-nodes.finished" and out.message.status == "Failed"
    assert "planDigest" in out.message.reason and not commands(sent)
    assert out.message.kind == "invalid" and refused(json.loads(out.message.to_bytes()))  # the CLI's exit 2


async def test_a_join_commands_only_the_new_node_phase_by_phase_and_ends_once(wired):
    joins, _, state, r, sent = wired
    j = joins()
    assert await j.on_request(JoinNodes(request_id="j1", cluster="mbr", plan_digest=DIGEST, nodes=["node2"])) == []
    await j.reconcile("mbr")
    asked = [s for s, _, _ in sent if s in ("bke.v1.manifests.render", "bke.v1.certs.issue")]
    assert sorted(asked) == ["bke.v1.certs.issue", "bke.v1.manifests.render"]
    assert (await j.reconcile("mbr")).status == "wait" and len(asked) == 2  # asked once
    # the services answer with the join's slug; the bundle is sealed to node2's agent
    assert await j.rendered(ManifestsRendered(request_id="join@j1", cluster="mbr", digest="d", nodes=5, files=9, tier="t",
                                              template_sets=[], plan_digest=DIGEST))
    assert await j.certs_issued(CertsIssued(request_id="join@j1", cluster="mbr", issued=[], reissued=[], reused=1,
                                            changed_nodes=1, plan_digest=DIGEST))
    assert not await j.rendered(ManifestsRendered(request_id="upgrade-u1", cluster="mbr", digest="d", nodes=5, files=9,
                                                  tier="t", template_sets=[]))  # not a join's: the install's handler
    out = await j.reconcile("mbr")
    assert out.status == "wait" and "waiting for the agents of node2" in out.reason
    await state.add_sealed("mbr", ["node2"])
    phases = []
    for _ in range(6):
        await joins().reconcile("mbr")  # a new dispatcher object each pass: all state is in Redis
        new = [c for c in commands(sent) if c.command_id not in phases]
        if not new:
            break
        [cmd] = new
        phases.append(cmd.command_id)
        await j.on_result(result(cmd))
        await j.on_result(result(cmd))  # a redelivered result counts once
    assert phases == [f"mbr/join@j1/node2/{i}" for i in range(4)]
    assert {c.node for c in commands(sent)} == {"node2"}  # nobody else
    assert [c.phase for c in commands(sent)] == ["node-env", "certs", "workers", "health"]
    assert await r.hexists("bke:mbr:node-labels", "node2")
    finished = [JoinNodesFinished.model_validate_json(b) for s, b, _ in sent if s == "bke.v1.join-nodes.finished"]
    assert [f.status for f in finished] == ["Succeeded"] and finished[0].nodes[0].status == "Succeeded"
    await joins().reconcile("mbr")
    assert len([s for s, _, _ in sent if s == "bke.v1.join-nodes.finished"]) == 1


async def test_a_failed_phase_fails_the_join_with_its_output(wired):
    joins, _, state, _, sent = wired
    j = joins()
    await j.on_request(JoinNodes(request_id="j2", cluster="mbr", plan_digest=DIGEST, nodes=["node2"]))
    await j.reconcile("mbr")
    await j.store.record_input("mbr", "render", "join@j2", "Ready", DIGEST, "")
    await j.store.record_input("mbr", "certs", "join@j2", "Ready", DIGEST, "")
    await state.add_sealed("mbr", ["node2"])
    await j.reconcile("mbr")
    [cmd] = commands(sent)
    await j.on_result(result(cmd, "Failed"))
    out = await j.reconcile("mbr")
    assert out.status == "failed" and out.reason.startswith("node node2 phase node-env step") and "boom" in out.reason


async def test_a_join_whose_agent_never_registers_fails_at_the_deadline_naming_it(wired):
    """The wait for the agents starts when the inputs are ready and is kept in the record (a
    restarted dispatcher keeps the same deadline); past it the join fails, naming the node and
    `bke agent provision`, and frees the cluster's slot."""
    from datetime import timedelta

    from bke.adapters.state.operation_slot import operation_holder

    joins, _, _, r, sent = wired
    assert await joins().on_request(JoinNodes(request_id="j4", cluster="mbr", plan_digest=DIGEST, nodes=["node2"])) == []
    await joins().reconcile("mbr")
    await joins().store.record_input("mbr", "render", "join@j4", "Ready", DIGEST, "")
    await joins().store.record_input("mbr", "certs", "join@j4", "Ready", DIGEST, "")
    later = NOW + timedelta(seconds=600)
    out = await joins(later).reconcile("mbr")
    assert out.status == "wait" and "node2 to register" in out.reason and "900 s left" in out.reason
    assert (await joins().store.load("mbr")).agents_since == later.isoformat()
    out = await joins(later + timedelta(seconds=899)).reconcile("mbr")  # a new object: the start is read back
    assert out.status == "wait" and "1 s left" in out.reason
    out = await joins(later + timedelta(seconds=900)).reconcile("mbr")
    assert out.status == "failed" and "the agents of node2 never registered within 900 s" in out.reason
    assert "bke agent provision" in out.reason and not commands(sent)
    [fin] = [JoinNodesFinished.model_validate_json(b) for s, b, _ in sent if s == "bke.v1.join-nodes.finished"]
    assert fin.status == "Failed" and fin.reason == out.reason
    assert await operation_holder(r, "mbr") is None


async def test_a_removal_drains_deletes_resets_forgets_and_names_the_identity(wired):
    _, removals, state, r, sent = wired
    await state.accept_agents("mbr", {"node2": "a"})
    await state.add_sealed("mbr", ["node2"])
    await r.hset("bke:mbr:heartbeat", "node2", "t")
    rm = removals()
    [out] = await rm.on_request(RemoveNodes(request_id="x1", cluster="mbr", nodes=["master1"]))
    assert out.message.status == "Failed" and "master1 (etcd member of etcd-data)" in out.message.reason
    assert await rm.on_request(RemoveNodes(request_id="r1", cluster="mbr", nodes=["node2"])) == []
    assert (await rm.reconcile("mbr")).status == "wait"
    doc = json.loads(await r.hget("bke:mbr:removal:api", "node2"))
    assert set(doc) == {"cordoned", "drained", "deleted"}
    [cmd] = commands(sent)
    assert cmd.command_id == "mbr/remove@r1/node2/0" and cmd.steps[0].type == "reset_node" and cmd.steps[0].binaries
    await rm.on_result(result(cmd))
    assert (await removals().reconcile("mbr")).status == "done"
    assert await state.accepted_agent("mbr", "node2") is None
    assert not await r.sismember("bke:mbr:sealed", "node2") and not await r.hexists("bke:mbr:heartbeat", "node2")
    [fin] = [RemoveNodesFinished.model_validate_json(b) for s, b, _ in sent if s == "bke.v1.remove-nodes.finished"
             and b"r1" in b]
    assert fin.status == "Succeeded" and fin.revoke_identities == ["agent.mbr.node2"]
    assert len(commands(sent)) == 1  # nothing to any other node
    # `bke status` shows the last removal (GetStatus reads it as it reads a reset)
    doc = await StatusReader(r, PlanCache(r)).read(GetStatus(cluster="mbr"))
    assert doc.removal is not None and (doc.removal.request_id, doc.removal.status) == ("r1", "Succeeded")
    assert [(n.hostname, n.stage, n.status) for n in doc.removal.nodes] == [("node2", "done", "Succeeded")]
    assert doc.join is None and doc.operation is None


async def test_status_shows_a_running_join_with_what_it_waits_for_and_the_slot_it_holds(wired):
    joins, _, _, r, _ = wired
    assert await joins().on_request(JoinNodes(request_id="j6", cluster="mbr", plan_digest=DIGEST, nodes=["node2"])) == []
    await joins().reconcile("mbr")  # asks the renderer and the certs service
    await joins().reconcile("mbr")  # waits for them
    doc = await StatusReader(r, PlanCache(r)).read(GetStatus(cluster="mbr"))
    assert doc.join is not None and (doc.join.request_id, doc.join.status) == ("j6", "Running")
    assert doc.join.waiting.startswith("waiting for the rendered files and the certificates")
    assert [(n.hostname, n.status) for n in doc.join.nodes] == [("node2", "Pending")]
    assert doc.operation is not None and (doc.operation.kind, doc.operation.request_id) == ("join", "j6")
    assert ClusterStatus.model_validate_json(doc.to_bytes()) == doc


async def test_the_upgraders_lab_drainer_still_records_in_the_upgrade_key(redis_url, redis_client):
    """The drain moved to bke.adapters.drain; the upgrader's lab record stays where its tests read it."""
    from bke_upgrader.drain import LabDrainer as UpgraderDrainer

    r = Redis.from_url(redis_url)
    try:
        d = UpgraderDrainer(r, lambda: NOW)
        assert await d.cordon_and_drain(PLAN, ["node1"], 5.0) == ""
        await d.uncordon(PLAN, ["node1"])
        doc = json.loads(await r.hget("bke:mbr:upgrade:drain", "node1"))
        assert set(doc) == {"cordoned", "drained", "uncordoned"}
    finally:
        await r.aclose()


async def test_joins_and_removals_hold_the_clusters_one_operation_slot(wired):
    """A join claims the slot (bke.adapters.state.operation_slot) atomically against every other kind: a
    held slot refuses it naming the holder; while it runs an upgrade's claim is refused naming
    the join; its end frees the slot. A removal does the same."""
    from bke.adapters.state.operation_slot import claim_operation, operation_holder, release_operation

    joins, removals, state, r, sent = wired
    assert (await claim_operation(r, "mbr", "upgrade", "u1", "t0")).won
    [out] = await joins().on_request(JoinNodes(request_id="j2", cluster="mbr", plan_digest=DIGEST, nodes=["node2"]))
    assert out.message.status == "Failed" and out.message.reason == "upgrade u1 of mbr is running: one operation per cluster"
    [out] = await removals().on_request(RemoveNodes(request_id="x2", cluster="mbr", nodes=["node1"]))
    assert out.message.status == "Failed" and "upgrade u1 of mbr is running" in out.message.reason
    await release_operation(r, "mbr", "upgrade", "u1")

    assert await joins().on_request(JoinNodes(request_id="j3", cluster="mbr", plan_digest=DIGEST, nodes=["node2"])) == []
    refused = await claim_operation(r, "mbr", "upgrade", "u2", "t1")
    assert not refused.won and refused.refusal("mbr") == "join j3 of mbr is running: one operation per cluster"
    # the join fails (a phase fails), and its end frees the slot before it is announced
    j = joins()
    await j.reconcile("mbr")
    await j.rendered(ManifestsRendered(request_id="join@j3", cluster="mbr", digest="d", nodes=5, files=9, tier="t",
                                       template_sets=[], plan_digest=DIGEST))
    await j.certs_issued(CertsIssued(request_id="join@j3", cluster="mbr", issued=[], reissued=[], reused=1,
                                     changed_nodes=1, plan_digest=DIGEST))
    await state.add_sealed("mbr", ["node2"])
    await j.reconcile("mbr")
    [cmd] = commands(sent)
    await j.on_result(result(cmd, "Failed"))
    assert (await j.reconcile("mbr")).status == "failed"
    assert await operation_holder(r, "mbr") is None
    assert (await claim_operation(r, "mbr", "upgrade", "u3", "t2")).won


async def test_the_dispatchers_busy_reader_names_the_slot_holder_and_unclaimed_records(redis_url, redis_client):
    """What the wired dispatcher asks before a join or removal (ops.membership.gates.busy_reader):
    the operation slot's holder of another kind, else a record running without a claim."""
    from bke.adapters.state.operation_slot import claim_operation, release_operation
    from bke_dispatcher.ops.membership.gates import busy_reader
    from bke_dispatcher.ops.rotation.run import RotationStore

    r = Redis.from_url(redis_url)
    try:
        joins = JoinStore(r)
        removals = RemovalStore(r)
        busy = busy_reader(r, RotationStore(r), joins, removals)
        assert await busy("quiet") is None
        assert (await claim_operation(r, "quiet", "reset", "z1", "t0")).won
        assert await busy("quiet") == Busy("reset", "z1") and str(Busy("reset", "z1")) == "reset z1"
        await release_operation(r, "quiet", "reset", "z1")
        assert (await claim_operation(r, "quiet", "join", "j9", "t0")).won
        assert await busy("quiet") is None  # a join holds it without a record: the join's own refusal says it better
    finally:
        await r.aclose()


async def test_a_join_and_a_removal_sent_by_the_apply_run_run_inside_its_slot(wired):
    """`partOf`: the apply run that holds the slot sends JoinNodes and RemoveNodes; they start
    without a claim of their own, and the join's end leaves the apply's slot held. Named for an
    apply that does not hold the slot (ended, or another request id), each is refused by name."""
    from bke.adapters.state.operation_slot import claim_operation, operation_holder
    from bke_dispatcher.ops.membership.gates import busy_reader
    from bke_dispatcher.ops.rotation.run import RotationStore

    make_joins, make_removals, state, r, sent = wired
    join_store = JoinStore(r)
    removal_store = RemovalStore(r)
    busy = busy_reader(r, RotationStore(r), join_store, removal_store)
    joins, removals = make_joins(), make_removals()
    joins.busy = removals.busy = busy
    assert (await claim_operation(r, "mbr", "apply", "a1", "t0")).won

    [out] = await joins.on_request(JoinNodes(request_id="j8", cluster="mbr", plan_digest=DIGEST, nodes=["node2"],
                                             part_of="a0"))
    assert out.message.status == "Failed"
    assert out.message.reason == "partOf: apply a0 does not hold the operation slot of mbr (apply a1 does)"
    [out] = await joins.on_request(JoinNodes(request_id="j9", cluster="mbr", plan_digest=DIGEST, nodes=["node2"]))
    assert out.message.reason == "apply a1 of mbr is running: join after it ends"  # not sent by that apply

    assert await joins.on_request(JoinNodes(request_id="j10", cluster="mbr", plan_digest=DIGEST, nodes=["node2"],
                                            part_of="a1")) == []
    assert (await join_store.load("mbr")).request_id == "j10"
    holder = await operation_holder(r, "mbr")
    assert (holder.kind, holder.request_id) == ("apply", "a1")
    # the join fails (its input fails): the apply's slot stays held, the end is announced
    await joins.reconcile("mbr")
    await joins.render_failed(RenderFailed(request_id="join@j10", cluster="mbr", errors=["bad"]))
    assert (await joins.reconcile("mbr")).status == "failed"
    holder = await operation_holder(r, "mbr")
    assert (holder.kind, holder.request_id) == ("apply", "a1")
    assert any(s == "bke.v1.join-nodes.finished" and b'"j10"' in b for s, b, _ in sent)

    [out] = await removals.on_request(RemoveNodes(request_id="x8", cluster="mbr", nodes=["node2"], part_of="a0"))
    assert out.message.status == "Failed" and out.message.reason.startswith("partOf: apply a0")
    assert await removals.on_request(RemoveNodes(request_id="x9", cluster="mbr", nodes=["node2"], part_of="a1")) == []
    assert (await removal_store.load("mbr")).status == "Running"


async def test_an_etcd_only_node_is_removed_only_by_the_apply_that_took_its_member_out(redis_url, redis_client):
    """An etcd-only node or a master is no worker: refused by name; sent by the apply run that
    removed its etcd member first and ordered the scale-in (`partOf`), it is drained, reset and
    forgotten like a worker."""
    from bke.adapters.state.operation_slot import claim_operation
    from bke_dispatcher.ops.membership.gates import busy_reader
    from bke_dispatcher.ops.rotation.run import RotationStore

    from tests.unit.planner.test_apply_run import _grow_spec  # a split layout with dedicated etcd-events nodes

    plan = plan_spec_text(_grow_spec(("events1", "events2", "events3"))).plan
    pj = plan.to_json()
    r = Redis.from_url(redis_url)
    try:
        await RedisPlanStore(r).save(plan, pj, plan_digest(pj), "req", NOW.isoformat())
        state = DispatcherState(r)
        await state.start_install("grow", "req", NOW.isoformat(), plan_digest(pj))
        await state.set_install("grow", status="Succeeded")
        joins = JoinStore(r)
        store = RemovalStore(r)
        sent: list = []

        async def publish(body: bytes, subject: str, headers: dict[str, str]) -> None:
            sent.append((subject, body))

        async def not_paused(cluster: str) -> bool:
            return False

        async def sign(cmd: AgentCommand) -> AgentCommand:
            return signed(cmd)

        removals = Removals(store, state, PlanCache(r), LabDrainer(r, lambda: NOW, removal_api_key),
                            busy_reader(r, RotationStore(r), joins, store), not_paused, publish, lambda: NOW, "me",
                            sign=sign)
        [out] = await removals.on_request(RemoveNodes(request_id="e1", cluster="grow", nodes=["events3"]))
        assert out.message.status == "Failed" and "events3 (etcd member of etcd-events)" in out.message.reason
        assert (await claim_operation(r, "grow", "apply", "a7", "t0")).won
        [out] = await removals.on_request(RemoveNodes(request_id="e2", cluster="grow", nodes=["m1"]))
        assert out.message.status == "Failed" and "m1 (control plane)" in out.message.reason
        assert await removals.on_request(RemoveNodes(request_id="e3", cluster="grow", nodes=["events3"], part_of="a7")) == []
        assert (await store.load("grow")).nodes[0].hostname == "events3"
    finally:
        await r.aclose()


async def test_a_request_failing_on_every_delivery_is_answered_failed_not_left_to_time_out(
        nats_url, redis_url, redis_client, nats_client):
    """On real NATS, the dispatcher app: a JoinNodes and a RemoveNodes whose handler raises on
    every delivery (their cluster's record is unreadable JSON) are dead-lettered after the
    maximum deliveries and answered `finished` Failed with the reason (the give-up hook), so the
    caller does not wait for its timeout. A body that is not JSON is dead-lettered at once and
    answered by nobody: there is no request id to answer."""
    from bke.adapters.bus import EventWatch
    from bke.adapters.bus.streams import ensure_streams
    from bke.contracts.membership import JOIN_NODES, JOIN_NODES_FINISHED, REMOVE_NODES, REMOVE_NODES_FINISHED
    from bke_dispatcher.app import create_service
    from bke_dispatcher.settings import DispatcherSettings

    r = Redis.from_url(redis_url)
    js = nats_client.jetstream()
    await ensure_streams(js)
    await r.set(join_key("gvup"), b"{not json")
    await r.set(removal_key("gvup"), b"{not json")
    svc = create_service(DispatcherSettings(nats_url=nats_url, redis_url=redis_url, owner="gu", mode="lab",
                                            health_interval_s=0, max_deliver=2))
    await svc.start()
    try:
        async with EventWatch(nats_client, [JOIN_NODES_FINISHED, REMOVE_NODES_FINISHED,
                                            "bke.v1.deadletter.dispatcher"]) as watch:
            await js.publish(JOIN_NODES, b"\xff not json")
            await js.publish(JOIN_NODES, JoinNodes(request_id="gj1", cluster="gvup", plan_digest="0" * 64,
                                                   nodes=["node2"]).to_bytes())
            await js.publish(REMOVE_NODES, RemoveNodes(request_id="gr1", cluster="gvup", nodes=["node2"]).to_bytes())
            done = {}
            for subject, rid in ((JOIN_NODES_FINISHED, "gj1"), (REMOVE_NODES_FINISHED, "gr1")):
                ev = await watch.wait_for(lambda e, s=subject, i=rid: e.subject == s and e.data.get("requestId") == i,
                                          timeout=30)
                done[rid] = ev.data
            for doc in done.values():
                assert doc["status"] == "Failed" and doc["cluster"] == "gvup" and doc["nodes"] == []
                assert doc["reason"].startswith("the dispatcher gave up on this") and "JSONDecodeError" in doc["reason"]
                # a failure, not a refusal: `bke lab join-nodes` / `remove-nodes` exit 1 with the reason
                assert doc["kind"] == "operational" and not refused(doc)
                with pytest.raises(typer.Exit) as code:
                    membership_exit(doc, Console())
                assert code.value.exit_code == 1
            letters = [e.data for e in watch.seen if e.subject == "bke.v1.deadletter.dispatcher"]
            by_subject = {(d["subject"], d["deliveries"]) for d in letters}
            assert {(JOIN_NODES, 1), (JOIN_NODES, 2), (REMOVE_NODES, 2)} <= by_subject  # malformed at once; the others after 2
            finished = [e for e in watch.seen if e.subject in (JOIN_NODES_FINISHED, REMOVE_NODES_FINISHED)]
            assert len(finished) == 2  # nothing for the body that was no request
    finally:
        await svc.stop()
        await r.delete(join_key("gvup"), removal_key("gvup"))
        await r.aclose()


async def test_giving_up_on_a_request_that_started_leaves_it_to_its_runner_and_gives_back_a_half_claim(wired):
    """The give-up hook (ops.membership.give_up) on real Redis: a request whose record started is
    its runner's to end (kicked, nothing published); one whose start failed after the slot's
    claim has the claim given back before `finished` Failed; a body with no request id is
    answered by nobody."""
    from bke.adapters.state.operation_slot import claim_operation, operation_holder
    from bke_dispatcher.ops.membership.give_up import answer_given_up, request_of

    joins, _, _, r, sent = wired
    j = joins()
    assert await j.on_request(JoinNodes(request_id="j5", cluster="mbr", plan_digest=DIGEST, nodes=["node2"])) == []
    kicked: list[str] = []

    async def publish(body: bytes, subject: str, headers: dict[str, str]) -> None:
        sent.append((subject, body, headers))

    gave_up = answer_given_up("join", j.store, r, publish, lambda: NOW, kicked.append)
    body = JoinNodes(request_id="j5", cluster="mbr", plan_digest=DIGEST, nodes=["node2"]).to_bytes()
    await gave_up(body, "RuntimeError: boom")
    assert kicked == ["mbr"] and not [s for s, _, _ in sent if s.endswith(".finished")]

    removal = RemovalStore(r)
    assert (await claim_operation(r, "other", "removal", "x9", "t0")).won  # a start that failed after its claim
    gave_up = answer_given_up("removal", removal, r, publish, lambda: NOW, kicked.append)
    await gave_up(RemoveNodes(request_id="x9", cluster="other", nodes=["node2"]).to_bytes(), "KeyError: 'x'")
    assert await operation_holder(r, "other") is None
    [(subject, raw, headers)] = [s for s in sent if s[0].endswith(".finished")]
    fin = RemoveNodesFinished.model_validate_json(raw)
    assert subject == "bke.v1.remove-nodes.finished" and headers == {"Nats-Msg-Id": "remove-finished:other:x9"}
    assert fin.status == "Failed" and fin.reason.endswith("after every delivery failed: KeyError: 'x'")

    for junk in (b"\xff", b"[1]", b'{"requestId": "r"}', b'{"requestId": 3, "cluster": "c"}', b"null"):
        assert request_of(junk) is None
        await gave_up(junk, "x")
    assert len([s for s in sent if s[0].endswith(".finished")]) == 1
    assert request_of(b'{"requestId": "r", "cluster": "c", "nodes": "not a list"}') == ("r", "c")


@pytest.mark.parametrize("kind", ["join", "removal"])
async def test_a_record_in_a_newer_form_answers_the_request_failed_naming_the_forms(wired, kind):
    """A join (removal) record written by a newer dispatcher (form 4 here) is not read and not
    left unanswered: the request is answered Failed, naming the form found and the newest this
    dispatcher reads, and the record is left as it was."""
    from bke.core.state.schema import SCHEMA_FIELD, record_kind

    make_joins, make_removals, _, r, sent = wired
    newest = record_kind(kind).current
    newer = json.dumps({"cluster": "mbr", "requestId": "from-the-future", SCHEMA_FIELD: newest + 1})
    key = join_key("mbr") if kind == "join" else removal_key("mbr")
    await r.set(key, newer)
    if kind == "join":
        outs = await make_joins().on_request(JoinNodes(request_id="j-new", cluster="mbr", plan_digest=DIGEST,
                                                       nodes=["node2"]))
    else:
        outs = await make_removals().on_request(RemoveNodes(request_id="r-new", cluster="mbr", nodes=["node1"]))
    [out] = outs
    assert out.subject == f"bke.v1.{'join' if kind == 'join' else 'remove'}-nodes.finished"
    assert out.message.status == "Failed" and out.message.kind == "operational"  # no refusal of the input
    reason = out.message.reason
    assert f"{kind} record of mbr is in form version {newest + 1}" in reason, reason
    assert f"reads forms up to {newest}" in reason and "upgrade this dispatcher" in reason
    assert (await r.get(key)).decode() == newer and not commands(sent)
