"""bke-agent against a real NATS JetStream: each agent gets only its own node's commands,
results come back, a redelivered completed command is replayed (not re-run), and an agent
stopped and restarted catches up with what was published meanwhile and runs nothing twice."""
from __future__ import annotations

import asyncio
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext

from bke.adapters.bus.watch import EventWatch, Seen
from bke.contracts.agent import AgentCommand, agent_subject
from bke.contracts.agent_steps import RunProgram, Step
from bke.contracts.operation_ref import OperationKind, OperationRef
from bke.core.secrets.binding import Binding
from bke.core.secrets.signing import sign_command
from bke_agent import (AgentConflict, AgentIdentity, AgentLoop, AgentSettings, DiskJournal, Fleet, MemoryJournal,
                       NullBackend, StepOutcome, execution_counts)
from bke_agent.backends.base import Content
from bke_agent.version import RUNNING_VERSION
from tests.trust_helpers import SIGNER, signed, verifier

pytestmark = pytest.mark.integration
TIMEOUT = 15.0


def _settings(nats_url: str, cluster: str, node: str, **kw: Any) -> AgentSettings:
    return AgentSettings(cluster=cluster, node=node, nats_url=nats_url, heartbeat_s=kw.pop("heartbeat_s", 0),
                         ack_wait_s=kw.pop("ack_wait_s", 5), stop_grace_s=kw.pop("stop_grace_s", 5), **kw)


def _cmd(cluster: str, node: str, cid: str, *steps: Step) -> AgentCommand:
    """A node-env command whose id ends in `cid` (the id names its operation: bke.core.host_actions.origins)."""
    steps = steps or (RunProgram(id="noop", argv=["swapoff", "-a"]),)
    return signed(AgentCommand(command_id=f"{cluster}/node-env/{node}/{cid}", cluster=cluster, node=node, phase="node-env",
                               issued_at=datetime.now(timezone.utc).isoformat(), steps=list(steps)))


async def _send(js: JetStreamContext, cmd: AgentCommand, *, body_node: str | None = None) -> None:
    body = cmd if body_node is None else cmd.model_copy(update={"node": body_node})
    await js.publish(agent_subject(cmd.cluster, cmd.node, "command"), body.to_bytes())


def _ends(e: Seen, cid: str) -> bool:
    return str(e.data.get("commandId")).endswith(f"/{cid}")


def _result_of(cid: str, replayed: bool | None = None) -> Any:
    def match(e: Seen) -> bool:
        return e.subject.endswith(".result") and _ends(e, cid) and (
            replayed is None or e.data.get("replayed") is replayed)
    return match


async def test_agents_get_only_their_own_commands(nats_client: NatsClient, js: JetStreamContext,
                                                  nats_url: str, cluster: str) -> None:
    loops = {n: AgentLoop(nats_client, js, _settings(nats_url, cluster, n), NullBackend(), MemoryJournal(),
                          AgentIdentity.ephemeral(), verifier=verifier(cluster, n)) for n in ("n1", "n2.example")}
    async with EventWatch(nats_client, [f"bke.v1.agent.{cluster}.>"]) as watch:
        for loop in loops.values():
            await loop.start()
        await _send(js, _cmd(cluster, "n1", "a"))
        await _send(js, _cmd(cluster, "n1", "b"))
        await _send(js, _cmd(cluster, "n2.example", "c"))
        await _send(js, _cmd(cluster, "n1", "stray"), body_node="n2.example")  # wrong node in the body
        for cid in ("a", "b", "c"):
            await watch.wait_for(_result_of(cid), TIMEOUT)
        reg = await watch.wait_for(lambda e: e.subject.endswith("n2_example.registered"), TIMEOUT)
        assert reg.data["agentId"] == loops["n2.example"].identity.agent_id and reg.data["backend"] == "lab"
        c = await watch.wait_for(_result_of("c"), TIMEOUT)
        assert c.subject == agent_subject(cluster, "n2.example", "result") and c.data["node"] == "n2.example"
        assert c.data["status"] == "Succeeded" and c.data["agentId"] == loops["n2.example"].identity.agent_id
        # the stray command is dropped, not run, and nothing after it is blocked
        await _send(js, _cmd(cluster, "n1", "after-stray"))
        await watch.wait_for(_result_of("after-stray"), TIMEOUT)
        assert not [e for e in watch.seen if e.subject.endswith(".result") and _ends(e, "stray")]
    assert (loops["n1"].executed, loops["n2.example"].executed) == (3, 1)
    for loop in loops.values():
        await loop.stop()


async def test_heartbeats_on_core_nats(nats_client: NatsClient, js: JetStreamContext, nats_url: str,
                                       cluster: str) -> None:
    loop = AgentLoop(nats_client, js, _settings(nats_url, cluster, "n1", heartbeat_s=0.05), NullBackend(),
                     MemoryJournal(), AgentIdentity.ephemeral(), verifier=verifier(cluster, "n1"))
    async with EventWatch(nats_client, [f"bke.v1.heartbeat.{cluster}.>"]) as watch:
        await loop.start()
        first = await watch.wait_for(lambda e: True, TIMEOUT)
        await watch.wait_for(lambda e: e is not first, TIMEOUT)
    assert first.data["node"] == "n1" and first.data["agentId"] == loop.identity.agent_id
    # the agent's version, Python and platform: what the upgrade's agents step picks wheels by
    rt = first.data["runtime"]
    assert rt["agentVersion"] == RUNNING_VERSION and rt["python"] == "%d.%d" % sys.version_info[:2]
    await loop.stop()


class FailResultOnce:
    """Wraps a JetStream context: the first result publish fails, as if the agent died
    after storing the result and before publishing it."""

    def __init__(self, js: JetStreamContext) -> None:
        self.js, self.failed = js, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.js, name)

    async def publish(self, subject: str, payload: bytes, **kw: Any) -> Any:
        if subject.endswith(".result") and not self.failed:
            self.failed = True
            raise ConnectionError("simulated crash before the result was published")
        return await self.js.publish(subject, payload, **kw)


async def test_redelivered_completed_command_is_replayed(nats_client: NatsClient, js: JetStreamContext,
                                                         nats_url: str, cluster: str, tmp_path: Path) -> None:
    backend = NullBackend()
    journal = DiskJournal(tmp_path / "state")
    # result_retry_s=0: the failed publish is not sent again in place, so the redelivery path runs
    loop = AgentLoop(nats_client, FailResultOnce(js), _settings(nats_url, cluster, "n1", result_retry_s=0), backend,  # type: ignore[arg-type]
                     journal, AgentIdentity.ephemeral(), verifier=verifier(cluster, "n1"))
    async with EventWatch(nats_client, [f"bke.v1.agent.{cluster}.*.result"]) as watch:
        await loop.start()
        await _send(js, _cmd(cluster, "n1", "x1"))
        replay = await watch.wait_for(_result_of("x1"), TIMEOUT)  # only after the redelivery
        assert replay.data["replayed"] is True and replay.data["status"] == "Succeeded"
        await _send(js, _cmd(cluster, "n1", "x1"))  # the same command sent again by a restarted dispatcher
        await watch.wait_for(lambda e: e is not replay and _result_of("x1", True)(e), TIMEOUT)
    assert backend.steps_run == 1 and (loop.executed, loop.replayed) == (1, 2)
    assert execution_counts(tmp_path / "state") == {f"{cluster}/node-env/n1/x1": 1}
    await loop.stop()


class Gate(NullBackend):
    """Steps with id `wait` block until `release` is set; the others are free."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self.entered = asyncio.Event()

    async def execute(self, step: Step, content: Content) -> StepOutcome:
        if step.id == "wait":
            self.entered.set()
            await self.release.wait()
        return await super().execute(step, content)


async def test_restart_catches_up_and_runs_nothing_twice(nats_client: NatsClient, js: JetStreamContext,
                                                         nats_url: str, cluster: str, tmp_path: Path) -> None:
    state = tmp_path / "state"
    settings = _settings(nats_url, cluster, "n1", state_dir=state)

    def agent(backend: NullBackend) -> AgentLoop:
        identity, _ = AgentIdentity.load_or_create(state)
        return AgentLoop(nats_client, js, settings, backend, DiskJournal(state), identity,
                         verifier=verifier(cluster, "n1"))

    async with EventWatch(nats_client, [f"bke.v1.agent.{cluster}.*.result"]) as watch:
        gate = Gate()
        first = agent(gate)
        await first.start()
        await _send(js, _cmd(cluster, "n1", "done-before"))
        await watch.wait_for(_result_of("done-before"), TIMEOUT)
        await _send(js, _cmd(cluster, "n1", "interrupted", RunProgram(id="wait", argv=["swapoff", "-a"])))
        await asyncio.wait_for(gate.entered.wait(), TIMEOUT)
        await first.stop(grace=0.1)  # abandoned mid-command: not completed, handed back

        for cid in ("while-down-1", "while-down-2"):
            await _send(js, _cmd(cluster, "n1", cid))
        await _send(js, _cmd(cluster, "n1", "done-before"))  # a re-send of a completed command

        second_backend = NullBackend()
        second = agent(second_backend)
        await second.start()
        for cid in ("interrupted", "while-down-1", "while-down-2"):
            res = await watch.wait_for(_result_of(cid), TIMEOUT)
            assert res.data["replayed"] is False and res.data["agentId"] == second.identity.agent_id
        await watch.wait_for(_result_of("done-before", True), TIMEOUT)
        order = [str(e.data.get("commandId")).rpartition("/")[2] for e in watch.seen]
        assert order.index("interrupted") < order.index("while-down-1") < order.index("while-down-2")
    assert execution_counts(state) == {f"{cluster}/node-env/n1/{c}": 1 for c in ("done-before", "interrupted", "while-down-1",
                                                                                 "while-down-2")}
    assert second.replayed == 1 and second.executed == 3
    await second.stop()


async def test_a_second_live_agent_for_the_node_is_refused(nats_client: NatsClient, js: JetStreamContext,
                                                           nats_url: str, cluster: str) -> None:
    settings = _settings(nats_url, cluster, "n1")
    one = AgentLoop(nats_client, js, settings, NullBackend(), MemoryJournal(), AgentIdentity.ephemeral(),
                    verifier=verifier(cluster, "n1"))
    two = AgentLoop(nats_client, js, settings, NullBackend(), MemoryJournal(), AgentIdentity.ephemeral(),
                    verifier=verifier(cluster, "n1"))
    await one.start()
    with pytest.raises(AgentConflict, match="already consuming the commands of n1"):
        await two.start()
    await one.stop()


async def test_fleet_of_null_agents_on_one_connection(nats_client: NatsClient, js: JetStreamContext,
                                                      nats_url: str, cluster: str, tmp_path: Path) -> None:
    nodes = [f"n{i}" for i in range(30)]
    fleet = Fleet.null(nats_client, js, _settings(nats_url, cluster, "base"), nodes, state_root=tmp_path, fsync=False,
                       command_key=SIGNER.verify_key)
    async with EventWatch(nats_client, [f"bke.v1.agent.{cluster}.*.result"]) as watch:
        assert await fleet.start() > 0
        await asyncio.gather(*(_send(js, _cmd(cluster, n, f"{n}-1")) for n in nodes))
        for n in nodes:
            await watch.wait_for(_result_of(f"{n}-1"), TIMEOUT)
    assert fleet.executed == len(nodes)
    assert all(execution_counts(tmp_path / n) == {f"{cluster}/node-env/{n}/{n}-1": 1} for n in nodes)
    await fleet.stop()


async def test_every_command_is_answered_on_result_with_its_operation_echoed(nats_client: NatsClient, js: JetStreamContext,
                                                                             nats_url: str, cluster: str) -> None:
    """The upgrader's command is answered on `result`, as the dispatcher's: the dispatcher hears
    both and routes each by the operation the answer echoes (bke.contracts.operation_ref), its
    redelivery's replay too."""
    identity = AgentIdentity.ephemeral()
    loop = AgentLoop(nats_client, js, _settings(nats_url, cluster, "n1"), NullBackend(), MemoryJournal(),
                     identity, verifier=verifier(cluster, "n1"))
    ref = OperationRef(kind=OperationKind.UPGRADE, id="r1", step="workers")
    install = OperationRef(kind=OperationKind.INSTALL, step="node-env")

    def bound(cid: str, op: OperationRef, **update: str) -> AgentCommand:  # as the dispatcher signs for an agent that reads refs
        cmd = _cmd(cluster, "n1", cid).model_copy(update={"signature_b64": "", "operation": op, **update})
        return sign_command(cmd, SIGNER, binding=Binding(identity.agent_id, ""))

    up, disp = bound("up-1", ref, issuer="upgrader"), bound("disp-1", install)
    assert up.operation == ref
    async with EventWatch(nats_client, [f"bke.v1.agent.{cluster}.>"]) as watch:
        await loop.start()
        await _send(js, up)
        await _send(js, disp)
        first = await watch.wait_for(lambda e: _ends(e, "up-1") and "status" in e.data, TIMEOUT)
        answer = await watch.wait_for(lambda e: _ends(e, "disp-1") and "status" in e.data, TIMEOUT)
        await js.publish(agent_subject(cluster, "n1", "command"), up.to_bytes(), headers={"Nats-Msg-Id": "up-1-again"})
        again = await watch.wait_for(lambda e: _ends(e, "up-1") and e.data.get("replayed") is True,
                                     TIMEOUT)
    assert first.subject == again.subject == answer.subject == agent_subject(cluster, "n1", "result")
    assert first.data["status"] == "Succeeded" and first.data["replayed"] is False
    assert first.data["operation"] == again.data["operation"] == ref.model_dump(mode="json", by_alias=True)
    assert answer.data["operation"] == install.model_dump(mode="json", by_alias=True)
    assert loop.executed == 2 and loop.replayed == 1
    await loop.stop()
