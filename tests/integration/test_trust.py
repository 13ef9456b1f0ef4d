"""Agents trust only BKE, on real NATS JetStream and Redis:

- a forged command (unsigned, another key, another node) published on an agent's own subject is
  refused and reported on the agent's `refused` subject, and runs nothing; a signed one still runs
- a forged registration for an existing node gets no sealed bundle and an `agents.refused` event;
  only the key recorded through `bke.v1.agents.provision` is sealed to
- a registration for a node that does not exist, sent before the plan, leaves no state and does
  not stop the certs phase (the install once sat at "certs 0/4")
- a forged result on another node's subject, a result from an agent that is not the node's, and
  a forged failure change nothing in the install state and their text is never recorded
"""
from __future__ import annotations

import asyncio
import base64
from datetime import datetime, timezone

import pytest
from redis.asyncio import Redis

from bke.adapters.bus import EventWatch
from bke.adapters.bus.streams import ensure_streams
from bke.contracts import PLAN_CREATED, PlanCreated
from bke.contracts.agent import (
    AGENTS_PROVISION,
    AgentCommand,
    AgentRegistered,
    CommandResult,
    ProvisionAgent,
    StepResult,
    agent_subject,
)
from bke.contracts.agent_steps import RunProgram
from bke.contracts.certs import CERTS_SEALED, CertsSealed
from bke.core.plan import plan_spec_text
from bke.adapters.state import RedisPlanStore, plan_digest
from bke.adapters.state.keys.certs import certs_agents_key, provisioned_agents_key
from bke.adapters.state.keys.node_files import node_files_key
from bke.adapters.state.nodefiles import RedisNodeFiles
from bke_agent import AgentIdentity, AgentLoop, AgentSettings, MemoryJournal, NullBackend
from bke_certs.app import create_service as create_certs
from bke_certs.settings import CertsSettings
from bke_dispatcher.app import create_service as create_dispatcher
from bke_dispatcher.settings import DispatcherSettings
from bke_dispatcher.state import DispatcherState
from tests.trust_helpers import OTHER_SIGNER, signed, verifier

pytestmark = pytest.mark.integration
TIMEOUT = 30.0


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


def _cmd(cluster: str, node: str, cid: str) -> AgentCommand:
    return AgentCommand(command_id=cid, cluster=cluster, node=node, phase="node-env", issued_at=_now(),
                        steps=[RunProgram(id="s", argv=["swapoff", "-a"])])


async def _deadline_poll(check, what: str, timeout: float = TIMEOUT) -> None:  # noqa: ANN001
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, what
        await asyncio.sleep(0.05)  # polling Redis under a deadline: the effect has no event of its own


# agents: commands --------------------------------------------------------------------------------
async def test_forged_commands_are_refused_reported_and_run_nothing(nats_client, js, nats_url, cluster) -> None:
    backend = NullBackend()
    settings = AgentSettings(cluster=cluster, node="n1", nats_url=nats_url, heartbeat_s=0, ack_wait_s=5)
    loop = AgentLoop(nats_client, js, settings, backend, MemoryJournal(), AgentIdentity.ephemeral(),
                     verifier=verifier(cluster, "n1"))
    forged = {
        "unsigned": _cmd(cluster, "n1", "unsigned"),
        "other-key": signed(_cmd(cluster, "n1", "other-key"), OTHER_SIGNER),
        "other-node": signed(_cmd(cluster, "n2", "other-node")),  # signed for n2, published on n1's subject
        "tampered": signed(_cmd(cluster, "n1", "tampered")).model_copy(
            update={"steps": [RunProgram(id="s", argv=["/bin/sh", "-c", "touch /tmp/pwned"])]}),
    }
    async with EventWatch(nats_client, [f"bke.v1.agent.{cluster}.>"]) as watch:
        await loop.start()
        for cmd in forged.values():
            await js.publish(agent_subject(cluster, "n1", "command"), cmd.to_bytes())
        genuine = f"{cluster}/node-env/n1/0"  # as the install names it (bke.core.host_actions.origins)
        await js.publish(agent_subject(cluster, "n1", "command"), signed(_cmd(cluster, "n1", genuine)).to_bytes())
        await watch.wait_for(lambda e: e.subject.endswith(".result") and e.data["commandId"] == genuine, TIMEOUT)
        for cid in forged:
            ev = await watch.wait_for(lambda e, cid=cid: e.subject.endswith(".refused") and e.data["commandId"] == cid,
                                      TIMEOUT)
            assert ev.subject == agent_subject(cluster, "n1", "refused") and ev.data["reason"]
        reasons = {e.data["commandId"]: e.data["reason"] for e in watch.seen if e.subject.endswith(".refused")}
    await loop.stop()
    assert reasons["unsigned"] == "unsigned command" and "not the dispatcher key" in reasons["other-key"]
    assert "for node 'n2'" in reasons["other-node"] and reasons["tampered"] == "bad signature"
    assert backend.steps_run == 1 and loop.executed == 1 and loop.refused == 4  # only the genuine one ran
    assert not [e for e in watch.seen if e.subject.endswith(".result") and e.data["commandId"] in forged]


# certs: registrations ----------------------------------------------------------------------------
async def _seed_plan(r: Redis, name: str):  # noqa: ANN202
    plan = plan_spec_text(open("examples/seed-3m1w.yaml").read().replace("name: seed", f"name: {name}")).plan
    pj = plan.to_json()
    assert await RedisPlanStore(r).save(plan, pj, plan_digest(pj), "req-1", _now())
    return plan, plan_digest(pj)


def _registration(cluster: str, node: str, ident: AgentIdentity) -> AgentRegistered:
    return AgentRegistered(cluster=cluster, node=node, agent_id=ident.agent_id, seal_public_key_b64=ident.public_key_b64,
                           backend="lab", version="t", at=_now())


async def _provision(nc, cluster: str, node: str, ident: AgentIdentity) -> None:  # noqa: ANN001
    req = ProvisionAgent(cluster=cluster, node=node, agent_id=ident.agent_id, seal_public_key_b64=ident.public_key_b64)
    answer = await nc.request(AGENTS_PROVISION, req.to_bytes(), timeout=10)
    assert b'"ok":true' in answer.data, answer.data


@pytest.fixture
async def certs(nats_url, redis_url, redis_client, nats_client, operator_box):  # noqa: ANN001, ANN201
    js = nats_client.jetstream()
    await ensure_streams(js)
    svc = create_certs(CertsSettings(nats_url=nats_url, redis_url=redis_url, renew_interval_s=0, processes=1))
    await svc.start()
    r = Redis.from_url(redis_url)
    try:
        yield js, r
    finally:
        await svc.stop()
        await r.aclose()


async def test_a_forged_registration_gets_no_bundle_and_is_reported(certs, nats_client) -> None:
    js, r = certs
    plan, digest = await _seed_plan(r, "forge")
    nodes = [n.hostname for n in plan.nodes]
    real = {n: AgentIdentity.ephemeral() for n in nodes}
    for n, ident in real.items():
        await _provision(nats_client, "forge", n, ident)
    async with EventWatch(nats_client, [CERTS_SEALED, "bke.v1.certs.>", "bke.v1.agents.>"]) as watch:
        await js.publish(PLAN_CREATED, PlanCreated(request_id="req-1", cluster="forge", plan_key="k", plan_digest=digest,
                                                   nodes=len(nodes), etcd_clusters=["etcd-data"]).to_bytes())
        for n, ident in real.items():
            await js.publish(agent_subject("forge", n, "registered"), _registration("forge", n, ident).to_bytes())
        await watch.wait_for(lambda e: e.subject == "bke.v1.certs.issued" and e.data["cluster"] == "forge", 120)
        sealed: set[str] = set()
        while sealed != set(nodes):
            ev = await watch.wait_for(lambda e, s=frozenset(sealed): e.subject == CERTS_SEALED and not set(e.data["nodes"]) <= s
                                      and e.data["cluster"] in ("forge", "ghost"),
                                      TIMEOUT)
            sealed |= set(ev.data["nodes"])
            assert all(ev.data["agents"][n] == real[n].agent_id for n in ev.data["nodes"])
        before = await r.hget(node_files_key("forge", "certs"), nodes[0])
        attacker = AgentIdentity.ephemeral()
        await js.publish(agent_subject("forge", nodes[0], "registered"), _registration("forge", nodes[0], attacker).to_bytes())
        # (the stream may hold other tests' registrations: only this cluster's events count)
        refused = await watch.wait_for(lambda e: e.subject == "bke.v1.agents.refused" and e.data["cluster"] == "forge",
                                       TIMEOUT)
    assert refused.data["node"] == nodes[0] and refused.data["agentId"] == attacker.agent_id
    assert "not the one provisioned" in refused.data["reason"]
    accepted = {e.data["node"]: e.data["agentId"] for e in watch.seen
                if e.subject == "bke.v1.agents.accepted" and e.data["cluster"] == "forge"}
    assert accepted == {n: i.agent_id for n, i in real.items()}  # the attacker was never accepted
    # nothing sealed to the attacker: the node's bundle is the one sealed to its provisioned agent
    assert await r.hget(node_files_key("forge", "certs"), nodes[0]) == before
    stored = AgentRegistered.model_validate_json(await r.hget(certs_agents_key("forge"), nodes[0]))
    assert stored.agent_id == real[nodes[0]].agent_id
    sealed_after = [e for e in watch.seen if e.subject == CERTS_SEALED and attacker.agent_id in e.data["agents"].values()]
    assert sealed_after == []
    files = await RedisNodeFiles(r).get("forge", "certs", nodes[0]) or []
    secret = [f for f in files if f.sealed_b64]
    assert secret and all(real[nodes[0]].open_sealed(base64.b64decode(f.sealed_b64)) for f in secret)


async def test_an_unknown_node_registered_before_the_plan_leaves_no_state_and_the_certs_phase_goes_on(
        certs, nats_client) -> None:
    js, r = certs
    plan, digest = await _seed_plan(r, "ghost")
    await r.delete(*[k for k in await r.keys("bke:ghost:plan*")])  # the plan is not there yet
    nodes = [n.hostname for n in plan.nodes]
    real = {n: AgentIdentity.ephemeral() for n in nodes}
    async with EventWatch(nats_client, [CERTS_SEALED, "bke.v1.certs.>", "bke.v1.agents.refused"]) as watch:
        ghost = AgentIdentity.ephemeral()
        await js.publish(agent_subject("ghost", "nosuch", "registered"), _registration("ghost", "nosuch", ghost).to_bytes())
        await watch.wait_for(lambda e: e.subject == "bke.v1.agents.refused" and e.data["node"] == "nosuch"
                             and e.data["cluster"] == "ghost", TIMEOUT)
        assert await r.hget(certs_agents_key("ghost"), "nosuch") is None  # nothing from it was kept
        assert await r.hlen(provisioned_agents_key("ghost")) == 0
        for n, ident in real.items():
            await _provision(nats_client, "ghost", n, ident)
            await js.publish(agent_subject("ghost", n, "registered"), _registration("ghost", n, ident).to_bytes())
        plan, digest = await _seed_plan(r, "ghost")
        await js.publish(PLAN_CREATED, PlanCreated(request_id="req-1", cluster="ghost", plan_key="k", plan_digest=digest,
                                                   nodes=len(nodes), etcd_clusters=["etcd-data"]).to_bytes())
        issued = await watch.wait_for(lambda e: e.subject in ("bke.v1.certs.issued", "bke.v1.certs.failed")
                                      and e.data.get("cluster") == "ghost", 120)
        assert issued.subject == "bke.v1.certs.issued", issued.data
        sealed: set[str] = set()
        while sealed != set(nodes):
            ev = await watch.wait_for(lambda e, s=frozenset(sealed): e.subject == CERTS_SEALED and not set(e.data["nodes"]) <= s
                                      and e.data["cluster"] in ("forge", "ghost"),
                                      TIMEOUT)
            sealed |= set(ev.data["nodes"])
    assert "nosuch" not in sealed
    assert not [e for e in watch.seen if e.subject == "bke.v1.certs.failed" and e.data.get("cluster") == "ghost"]


async def test_provisioning_refuses_a_key_that_is_not_its_id(certs, nats_client) -> None:
    ident, other = AgentIdentity.ephemeral(), AgentIdentity.ephemeral()
    req = ProvisionAgent(cluster="p", node="n1", agent_id=other.agent_id, seal_public_key_b64=ident.public_key_b64)
    answer = await nats_client.request(AGENTS_PROVISION, req.to_bytes(), timeout=10)
    assert b'"ok":false' in answer.data and b"agentId" in answer.data
    garbage = await nats_client.request(AGENTS_PROVISION, b'{"cluster": "p"}', timeout=10)
    assert b'"ok":false' in garbage.data and b"node" in garbage.data
    _, r = certs
    assert await r.hlen(provisioned_agents_key("p")) == 0


# dispatcher: results -----------------------------------------------------------------------------
async def test_forged_results_and_failures_change_nothing(nats_url, redis_url, redis_client, nats_client,
                                                          operator_box) -> None:
    js = nats_client.jetstream()
    await ensure_streams(js)
    r = Redis.from_url(redis_url)
    st = DispatcherState(r)
    svc = create_dispatcher(DispatcherSettings(nats_url=nats_url, redis_url=redis_url, owner="x", mode="lab",
                                               health_interval_s=0))
    await svc.start()
    good, evil = AgentIdentity.ephemeral(), AgentIdentity.ephemeral()
    try:
        # a real cluster "res" (stored plan, install record): results about anything else are
        # dead-lettered before these checks (bke_dispatcher.known)
        plan = plan_spec_text(open("examples/seed-3m1w.yaml").read().replace("name: seed", "name: res")).plan
        pj = plan.to_json()
        assert await RedisPlanStore(r).save(plan, pj, plan_digest(pj), "req-1", _now())
        await st.start_install("res", "req-1", _now(), plan_digest(pj))
        await st.mark_sent("res", "etcd", {n: {"id": f"res/etcd/{n}/0", "gen": 0, "status": "Sent", "step": "",
                                               "stderr": "", "at": _now()} for n in ("master1", "master2")}, 2, _now())
        await js.publish(CERTS_SEALED, CertsSealed(cluster="res", nodes=["master1", "master2"],
                                                   agents={"master1": good.agent_id, "master2": AgentIdentity.ephemeral().agent_id}).to_bytes())
        await _deadline_poll(lambda: st.accepted_agent("res", "master1"), "the accepted agent was never recorded")

        def result(node: str, agent: AgentIdentity, status: str, stderr: str = "") -> CommandResult:
            step = StepResult(id="s", status="Failed" if status == "Failed" else "Succeeded", stderr=stderr)
            return CommandResult(command_id=f"res/etcd/{node}/0", cluster="res", node=node, agent_id=agent.agent_id,
                                 status=status, steps=[step], started_at=_now(), finished_at=_now())

        forged = [
            # m2's agent (or anyone allowed m2's subject) speaking for m1
            (agent_subject("res", "master2", "result"), result("master1", good, "Failed", "EVIL: from another node's subject")),
            # m1's subject, but not m1's accepted agent
            (agent_subject("res", "master1", "result"), result("master1", evil, "Failed", "EVIL: forged failure")),
            # a node outside the plan
            (agent_subject("res", "ghost", "result"), result("ghost", evil, "Succeeded")),
        ]
        for subject, res in forged:
            await js.publish(subject, res.to_bytes())
        await js.publish(agent_subject("res", "master1", "result"), result("master1", good, "Succeeded").to_bytes())
        await _deadline_poll(lambda: _status(st, "master1", "Succeeded"), "the genuine result was never counted")
        # m2: only forged results: still waiting, nothing recorded
        cmds = await st.all_commands("res", "etcd")
    finally:
        await svc.stop()
        await r.aclose()
    assert cmds["master1"]["status"] == "Succeeded" and cmds["master1"]["stderr"] == ""
    assert cmds["master2"]["status"] == "Sent" and "ghost" not in cmds
    assert not any("EVIL" in str(c) for c in cmds.values())


async def _status(st: DispatcherState, node: str, status: str) -> bool:
    return (await st.all_commands("res", "etcd")).get(node, {}).get("status") == status


async def test_refusals_are_shown_by_status_and_an_unknown_cluster_gets_no_state(
        nats_url, redis_url, redis_client, nats_client, operator_box) -> None:
    """A command an agent refused is reported where the operator looks (`bke status`), with
    its reason; a refusal about a cluster that was never installed creates nothing."""
    from bke.contracts.agent import CommandRefused
    from bke.adapters.state.keys.dispatcher import refusals_key
    from bke_cli.status_client import get_status

    js = nats_client.jetstream()
    await ensure_streams(js)
    r = Redis.from_url(redis_url)
    svc = create_dispatcher(DispatcherSettings(nats_url=nats_url, redis_url=redis_url, owner="x", mode="lab",
                                               health_interval_s=0))
    await svc.start()
    try:
        plan = plan_spec_text(open("examples/seed-3m1w.yaml").read().replace("name: seed", "name: refd")).plan
        pj = plan.to_json()
        assert await RedisPlanStore(r).save(plan, pj, plan_digest(pj), "req-1", _now())
        await DispatcherState(r).start_install("refd", "req-1", _now(), plan_digest(pj))
        for cluster in ("ghostcluster", "refd"):  # the unknown one first: the known one's answer proves both were read
            ev = CommandRefused(cluster=cluster, node="master1", agent_id="a", command_id=f"{cluster}/etcd/master1/0",
                                reason="signature does not verify", at=_now())
            await js.publish(agent_subject(cluster, "master1", "refused"), ev.to_bytes())

        async def shown() -> bool:
            doc = await get_status(nats_client, "refd", "none")
            return doc is not None and doc.refusals is not None
        await _deadline_poll(shown, "the refusal never reached the status")
        doc = await get_status(nats_client, "refd", "none")
        assert doc is not None and doc.refusals is not None
        assert doc.refusals.count == 1 and doc.refusals.last_node == "master1"
        assert "signature does not verify" in doc.refusals.last_reason
        assert not await r.exists(refusals_key("ghostcluster"))
    finally:
        await svc.stop()
        await r.aclose()
