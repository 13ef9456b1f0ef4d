"""Commands bound to their receiver, on real NATS JetStream and Redis, with a real `bke-agent`
process (its key, journal and remembered incarnation on disk), the real certs service for
provisioning and the signing the dispatcher and upgrader use (bke.adapters.state.command_signing):

- a command captured before the node's agent was provisioned again (a new key, the same state
  directory and journal) is refused after it, whether the old agent ran it or never saw it; a
  fresh command for the new key runs;
- across a cluster deleted and made again under the same name (the planner's and the certs
  service's records removed as `bke delete` removes them, the plan stored again: a new
  incarnation), the old cluster's commands are refused, while the new cluster's command of the
  very same id runs rather than being answered from the journal; before the new cluster's first
  command reaches the agent, a replay of the old one is answered from the journal naming the old
  incarnation, and the real dispatcher drops that answer (counted on /metrics) rather than
  count it for the new install's command of the same id;
- a registration, or a refusal, published on one node's subject naming another node is dropped
  and counted on the service's /metrics (certs, dispatcher); the same message on its own node's
  subject is handled.
"""
from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext
from redis.asyncio import Redis

from bke.adapters.bus import EventWatch
from bke.adapters.bus.misaddressed import METRIC
from bke.adapters.bus.other_incarnation import METRIC as OTHER_INCARNATION
from bke.adapters.bus.watch import Seen
from bke.contracts.agent import AgentCommand, AgentRegistered, CommandRefused, agent_subject
from bke.contracts.agent_steps import WriteFile
from bke.adapters.forgetting import forget_cluster
from bke.core.plan import plan_spec_text
from bke.adapters.runtime import ManagedProcess
from bke.core.secrets import SecretBox
from bke.adapters.state import RedisPlanStore, plan_digest
from bke.adapters.state.command_signing import CommandSigning
from bke_agent import AgentIdentity, execution_counts
from bke_certs.app import create_service as create_certs
from bke_certs.settings import CertsSettings
from bke_dispatcher.state import DispatcherState
from bke_cli.provision import KeyRecorder

from .agent_helpers import free_node_ip

pytestmark = pytest.mark.integration
TIMEOUT = 30.0
NODE = "master1"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


async def _until(check: Callable[[], Awaitable[bool]], what: str, timeout: float = TIMEOUT) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, what
        await asyncio.sleep(0.05)  # polling under a deadline: a dropped message has no event of its own


async def _store_plan(r: Redis, cluster: str) -> str:
    """The cluster's plan, stored as the planner stores a new one; its incarnation."""
    plan = plan_spec_text(open("examples/seed-3m1w.yaml").read().replace("name: seed", f"name: {cluster}")).plan
    pj = plan.to_json()
    assert await RedisPlanStore(r).save(plan, pj, plan_digest(pj), f"req-{cluster}", _now())
    inc = await RedisPlanStore(r).incarnation(cluster)
    assert inc
    return inc


@pytest.fixture
async def certs(nats_url: str, redis_url: str, redis_client: Any, operator_box: SecretBox) -> AsyncIterator[Any]:
    svc = create_certs(CertsSettings(nats_url=nats_url, redis_url=redis_url, renew_interval_s=0, processes=1))
    await svc.start()
    try:
        yield svc
    finally:
        await svc.stop()


@pytest.fixture
async def dispatcher(nats_url: str, redis_url: str, redis_client: Any, operator_box: SecretBox) -> AsyncIterator[Any]:
    from bke_dispatcher.app import create_service as create_dispatcher
    from bke_dispatcher.settings import DispatcherSettings

    svc = create_dispatcher(DispatcherSettings(nats_url=nats_url, redis_url=redis_url, owner="x", mode="lab",
                                               health_interval_s=0))
    await svc.start()
    try:
        yield svc
    finally:
        await svc.stop()


async def _other(svc: Any, count: float) -> bool:
    """Whether `svc` dropped `count` results of another incarnation of their cluster."""
    return (svc.metrics.sample(f"{OTHER_INCARNATION}_total", {"service": svc.name}) or 0.0) == count


@pytest.fixture
async def signing(redis_url: str, operator_box: SecretBox) -> AsyncIterator[tuple[CommandSigning, Redis]]:
    """What the dispatcher and the upgrader sign with (the deployment's key, the bindings read from Redis)."""
    r = Redis.from_url(redis_url)
    try:
        yield CommandSigning(r, lambda: operator_box), r
    finally:
        await r.aclose()


class Node:
    """One lab node's real agent: `bke-agent init` makes its key (kept in its state dir), the
    operator records it (`bke agent provision`'s channel), `start`/`stop` run the process."""

    def __init__(self, nats_url: str, cluster: str, tmp: Path, command_key: str) -> None:
        self.root, self.tmp = tmp / "hosts" / NODE, tmp
        self.root.mkdir(parents=True)
        self.state = self.root / "var/lib/bke-agent"
        ip, _ = free_node_ip(1)
        self.env = dict(os.environ, BKE_NATS_URL=nats_url, BKE_AGENT_CLUSTER=cluster, BKE_AGENT_NODE=NODE,
                        BKE_AGENT_BACKEND="lab", BKE_AGENT_ROOT=str(self.root), BKE_AGENT_IP=ip,
                        BKE_AGENT_HEARTBEAT_S="0", BKE_AGENT_ACK_WAIT_S="5", BKE_AGENT_COMMAND_KEY=command_key)
        self.proc: ManagedProcess | None = None
        self.runs = 0

    def init(self) -> str:
        out = subprocess.run([str(Path(sys.executable).parent / "bke-agent"), "init"], env=self.env,
                             capture_output=True, text=True, timeout=60, check=True)
        return out.stdout.strip().splitlines()[-1]

    async def provision(self, nc: NatsClient, cluster: str, new_key: bool = False) -> str:
        """Record this node's key (a new one first when `new_key`: the node provisioned again);
        its agent id."""
        if new_key:
            (self.state / "agent.key").unlink()
        line = self.init()
        assert await KeyRecorder(nc, cluster)(NODE, line) == ""
        return AgentIdentity.load(self.state).agent_id

    def start(self) -> None:
        self.runs += 1
        bke_agent = Path(sys.executable).parent / "bke-agent"
        self.proc = ManagedProcess.start("bke-agent", [bke_agent, "run"], self.tmp / f"agent{self.runs}.log", env=self.env)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()
            self.proc = None


@pytest.fixture
def node(nats_url: str, cluster: str, tmp_path: Path) -> Iterator[Node]:
    n = Node(nats_url, cluster, tmp_path, "")  # the command key is set by the test, once read
    try:
        yield n
    finally:
        n.stop()


def _cmd(cluster: str, cid: str) -> AgentCommand:
    step = WriteFile(id="write", path="/etc/kubernetes/pki/binding-test", content_b64=base64.b64encode(b"x").decode(),
                     sha256="2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881")
    return AgentCommand(command_id=cid, cluster=cluster, node=NODE, phase="certs", issued_at=_now(), steps=[step])


def _answer(cid: str, kind: str, replayed: bool = False) -> Callable[[Seen], bool]:
    return lambda e: (e.subject.endswith(f".{kind}") and e.data.get("commandId") == cid
                      and (kind != "result" or e.data.get("replayed") is replayed))


async def _registered(watch: EventWatch, agent_id: str) -> None:
    await watch.wait_for(lambda e: e.subject.endswith(".registered") and e.data["agentId"] == agent_id, TIMEOUT)


# acceptance: a re-provisioned agent ------------------------------------------------------------
async def test_a_command_captured_before_the_agent_was_provisioned_again_is_refused_after_it(
        nats_client: NatsClient, js: JetStreamContext, cluster: str, certs: Any,
        signing: tuple[CommandSigning, Redis], node: Node) -> None:
    sign, r = signing
    node.env["BKE_AGENT_COMMAND_KEY"] = (await sign.signer()).verify_key.public_line
    await _store_plan(r, cluster)
    subject = agent_subject(cluster, NODE, "command")
    ran, unsent, fresh = (f"{cluster}/certs/{NODE}/{i}" for i in range(3))
    async with EventWatch(nats_client, [f"bke.v1.agent.{cluster}.>"]) as watch:
        old_id = await node.provision(nats_client, cluster)
        node.start()
        await _registered(watch, old_id)
        captured = {ran: await sign.sign_bytes(_cmd(cluster, ran)),  # delivered: the old agent runs it
                    unsent: await sign.sign_bytes(_cmd(cluster, unsent))}  # kept by the attacker, never sent
        assert AgentCommand.model_validate_json(captured[ran]).agent_id == old_id
        await js.publish(subject, captured[ran])
        done = await watch.wait_for(_answer(ran, "result"), TIMEOUT)
        assert done.data["status"] == "Succeeded" and done.data["agentId"] == old_id

        node.stop()  # provisioned again: a new key; its state dir, journal included, stays
        new_id = await node.provision(nats_client, cluster, new_key=True)
        assert new_id != old_id
        node.start()
        await _registered(watch, new_id)
        for cid, body in captured.items():
            await js.publish(subject, body)
            refused = await watch.wait_for(_answer(cid, "refused"), TIMEOUT)
            assert f"bound to agent key {old_id}, not this agent's {new_id}" in refused.data["reason"], refused.data
        # the positive control: a command signed now is bound to the new key and runs
        await js.publish(subject, await sign.sign_bytes(_cmd(cluster, fresh)))
        done = await watch.wait_for(_answer(fresh, "result"), TIMEOUT)
    assert done.data["status"] == "Succeeded" and done.data["agentId"] == new_id
    assert execution_counts(node.state) == {ran: 1, fresh: 1}
    assert not [e for e in watch.seen if e.subject.endswith(".result") and e.data["commandId"] == unsent]


# a cluster deleted and made again under the same name ---------------------------------------------
async def test_a_cluster_made_again_under_its_name_refuses_the_deleted_ones_commands(
        nats_client: NatsClient, js: JetStreamContext, cluster: str, certs: Any, dispatcher: Any,
        signing: tuple[CommandSigning, Redis], node: Node) -> None:
    sign, r = signing
    node.env["BKE_AGENT_COMMAND_KEY"] = (await sign.signer()).verify_key.public_line
    first = await _store_plan(r, cluster)
    subject = agent_subject(cluster, NODE, "command")
    same, unsent = f"{cluster}/certs/{NODE}/0", f"{cluster}/certs/{NODE}/1"
    async with EventWatch(nats_client, [f"bke.v1.agent.{cluster}.>"]) as watch:
        agent_id = await node.provision(nats_client, cluster)
        node.start()
        await _registered(watch, agent_id)
        old = {same: await sign.sign_bytes(_cmd(cluster, same)), unsent: await sign.sign_bytes(_cmd(cluster, unsent))}
        assert AgentCommand.model_validate_json(old[same]).incarnation == first
        await js.publish(subject, old[same])
        await watch.wait_for(_answer(same, "result"), TIMEOUT)
        node.stop()

        # `bke delete`: each owner removes its records (the plan and its incarnation, the
        # provisioned keys); the node keeps its agent and state, and is provisioned again with
        # the same key, as `bke agent bootstrap` does
        for service in ("planner", "certs"):
            await forget_cluster(r, cluster, service)
        second = await _store_plan(r, cluster)
        assert second != first
        assert await node.provision(nats_client, cluster) == agent_id
        # the new install's dispatcher waits for the answer to its own command of the same id
        state = DispatcherState(r)
        await state.start_install(cluster, "new-install", _now())
        await state.set_install(cluster, status="Succeeded")  # its engine sends nothing here
        await state.accept_agents(cluster, {NODE: agent_id})
        await state.mark_sent(cluster, "certs", {NODE: {"id": same, "gen": 0, "status": "Sent"}}, None, _now())
        node.start()  # it reads the incarnation it remembers from its state dir
        await _registered(watch, agent_id)
        # before the new cluster's first command reaches it, the agent answers a replay of the
        # deleted cluster's from its journal: the answer names the old incarnation, and the
        # dispatcher drops it and counts it, rather than count it for the new install
        await js.publish(subject, old[same])
        replay = await watch.wait_for(_answer(same, "result", replayed=True), TIMEOUT)
        assert replay.data["incarnation"] == first
        await _until(lambda: _other(dispatcher, 1.0), "the old incarnation's answer was never counted as dropped")
        assert (await state.commands(cluster, "certs", [NODE]))[NODE]["status"] == "Sent"
        # the positive control: the new cluster's first command, with the old one's id, runs
        # and its answer counts
        fresh = await sign.sign_bytes(_cmd(cluster, same))
        assert AgentCommand.model_validate_json(fresh).incarnation == second
        await js.publish(subject, fresh)
        done = await watch.wait_for(lambda e: _answer(same, "result")(e) and e.data.get("incarnation") == second, TIMEOUT)
        assert done.data["status"] == "Succeeded" and done.data["replayed"] is False

        async def counted() -> bool:
            return (await state.commands(cluster, "certs", [NODE]))[NODE]["status"] == "Succeeded"
        await _until(counted, "the new cluster's answer was never counted")
        assert await _other(dispatcher, 1.0)
        for cid, body in old.items():
            await js.publish(subject, body)
            refused = await watch.wait_for(_answer(cid, "refused"), TIMEOUT)
            assert f"for incarnation {first} of cluster '{cluster}', not {second}" in refused.data["reason"]
    assert execution_counts(node.state) == {same: 2}  # once in each cluster; the old ones never again
    assert not [e for e in watch.seen if e.subject.endswith(".result") and e.data["commandId"] == unsent]


# registrations and refusals on another node's subject --------------------------------------------
def _dropped(svc: Any, kind: str) -> float:
    return svc.metrics.sample(f"{METRIC}_total", {"service": svc.name, "kind": kind}) or 0.0


def _counted(svc: Any, kind: str) -> Callable[[], Awaitable[bool]]:
    async def once() -> bool:
        return _dropped(svc, kind) == 1.0
    return once


async def test_a_registration_naming_another_node_is_dropped_and_counted(
        nats_client: NatsClient, js: JetStreamContext, redis_client: Any, certs: Any) -> None:
    cluster = "misaddr"
    ident = AgentIdentity.ephemeral()
    line = f"bke-agent-x25519 {ident.public_key_b64}"
    assert await KeyRecorder(nats_client, cluster)("master2", line) == ""
    reg = AgentRegistered(cluster=cluster, node="master2", agent_id=ident.agent_id,
                          seal_public_key_b64=ident.public_key_b64, backend="lab", version="t", at=_now())
    async with EventWatch(nats_client, ["bke.v1.agents.>"]) as watch:
        # master2's own registration, published by master1's identity: dropped, counted
        await js.publish(agent_subject(cluster, "master1", "registered"), reg.to_bytes())
        await _until(_counted(certs, "registered"), "the forgery was never counted")
        assert not [e for e in watch.seen if e.data.get("cluster") == cluster]  # neither accepted nor refused
        # the positive control: the same message on master2's subject is accepted
        await js.publish(agent_subject(cluster, "master2", "registered"), reg.to_bytes())
        accepted = await watch.wait_for(lambda e: e.subject == "bke.v1.agents.accepted" and e.data["cluster"] == cluster,
                                        TIMEOUT)
    assert accepted.data["node"] == "master2" and _dropped(certs, "registered") == 1.0


async def test_a_refusal_naming_another_node_is_dropped_and_counted(
        nats_url: str, redis_url: str, nats_client: NatsClient, js: JetStreamContext, redis_client: Any,
        operator_box: SecretBox) -> None:
    from bke_cli.status_client import get_status
    from bke_dispatcher.app import create_service as create_dispatcher
    from bke_dispatcher.settings import DispatcherSettings
    from bke_dispatcher.state import DispatcherState

    r = Redis.from_url(redis_url)
    svc = create_dispatcher(DispatcherSettings(nats_url=nats_url, redis_url=redis_url, owner="x", mode="lab",
                                               health_interval_s=0))
    await svc.start()
    try:
        cluster = "refmis"
        await _store_plan(r, cluster)
        meta = await RedisPlanStore(r).meta(cluster)
        assert meta is not None
        await DispatcherState(r).start_install(cluster, meta.request_id, _now(), meta.digest)

        def refusal(node: str, reason: str) -> bytes:
            return CommandRefused(cluster=cluster, node=node, agent_id="a", command_id=f"{cluster}/etcd/{node}/0",
                                  reason=reason, at=_now()).to_bytes()

        async def refusals() -> Any:
            doc = await get_status(nats_client, cluster, "none")
            assert doc is not None
            return doc.refusals

        # master1's identity reporting that master2 refused a command: dropped, counted
        await js.publish(agent_subject(cluster, "master1", "refused"), refusal("master2", "FORGED"))
        await _until(_counted(svc, "refused"), "the forgery was never counted")
        assert await refusals() is None
        # the positive control: master1's own refusal is shown by `bke status`
        await js.publish(agent_subject(cluster, "master1", "refused"), refusal("master1", "bad signature"))

        async def shown() -> bool:
            return await refusals() is not None
        await _until(shown, "the genuine refusal never reached the status")
        shown_doc = await refusals()
        assert shown_doc.count == 1 and shown_doc.last_node == "master1" and "FORGED" not in shown_doc.last_reason
        assert _dropped(svc, "refused") == 1.0
    finally:
        await svc.stop()
        await r.aclose()


# the signer's reads ----------------------------------------------------------------------------------
async def test_the_signer_reads_each_binding_when_it_signs_or_once_for_a_chunk(
        signing: tuple[CommandSigning, Redis], redis_client: Any) -> None:
    from bke.contracts.agent import ProvisionAgent
    from bke.core.secrets.binding import Binding
    from bke.adapters.state.command_signing import PREFETCH_S, CommandSigning as Signing
    from bke.adapters.state.keys.certs import provisioned_agents_key
    from bke.adapters.state.keys.dispatcher import heartbeat_runtime_key

    _, r = signing
    clock = [0.0]
    sign = Signing(r, lambda: SecretBox(b"\0" * 32), clock=lambda: clock[0])
    cluster = "reads"
    assert await sign.binding(cluster, "m1") is None  # nothing provisioned: unbound
    inc = await _store_plan(r, cluster)
    keys = {n: AgentIdentity.ephemeral() for n in ("m1", "m2", "m3")}

    async def provision(node: str, ident: AgentIdentity) -> None:
        await r.hset(provisioned_agents_key(cluster), node, ProvisionAgent(
            cluster=cluster, node=node, agent_id=ident.agent_id, seal_public_key_b64=ident.public_key_b64).to_bytes())

    for n, ident in keys.items():
        await provision(n, ident)
    runtime = {"agentVersion": "0.1.0", "python": "3.11", "machine": "x86_64"}
    await r.hset(heartbeat_runtime_key(cluster), "m3", json.dumps(runtime))  # an agent older than binding
    assert await sign.binding(cluster, "m1") == Binding(keys["m1"].agent_id, inc)
    assert await sign.binding(cluster, "m3") is None
    # a chunk's bindings read at once serve one command each; a node provisioned meanwhile is
    # read again at its next command (and any prefetched one older than PREFETCH_S is)
    await sign.prefetch(cluster, ["m1", "m2"])
    newer = AgentIdentity.ephemeral()
    await provision("m1", newer)
    assert await sign.binding(cluster, "m1") == Binding(keys["m1"].agent_id, inc)  # as read for the chunk
    assert await sign.binding(cluster, "m1") == Binding(newer.agent_id, inc)  # the next command reads again
    await provision("m2", newer)
    clock[0] = PREFETCH_S + 1
    assert await sign.binding(cluster, "m2") == Binding(newer.agent_id, inc)
