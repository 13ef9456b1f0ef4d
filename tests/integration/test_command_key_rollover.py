"""A rollover of the command-signing key on real NATS JetStream and Redis, with a real `bke-agent`
process bootstrapped with the old key (BKE_AGENT_COMMAND_KEY) and the signing the dispatcher and
upgrader use (bke.adapters.state.command_signing), the rollover stored as `bke keys command-key`
stores it (bke.adapters.state.command_key_rotation):

- before the announcement, a command under the next key is refused and one under the current
  key runs; an announcement signed by another key, or by the next key itself, is refused;
- the announcement signed by the current key is taken (the agent's keyring file written);
  during the overlap, commands under both keys run;
- the switch: the signer reads the new key without being made again;
- after the window, a command under the old key is refused and one under the new key runs,
  also after the agent is started again (its keyring file wins over its bootstrap key);
- the real dispatcher sends the announcement to an accepted agent by itself, records its
  acknowledgement, and answers the new key to `bke agent bootstrap` once switched;
- `bke keys command-key` refuses steps out of order (a switch before every accepted agent took
  the next key) and moves the stored keys as it says.
"""
from __future__ import annotations

import asyncio
import base64
import os
import sys
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext
from redis.asyncio import Redis

from bke.adapters.bus import EventWatch
from bke.adapters.bus.watch import Seen
from bke.adapters.runtime import ManagedProcess
from bke.adapters.state.command_key_rotation import acknowledgements, read_rollover, start_rollover, switch_rollover
from bke.adapters.state.command_signing import CommandSigning
from bke.adapters.state import RedisPlanStore, plan_digest
from bke.adapters.state.keys.dispatcher import accepted_agents_key, command_key_acks_key, install_key, installs_index
from bke.adapters.state.keys.trust import command_signing_key, command_signing_next_key
from bke.contracts.agent import AGENTS_COMMAND_KEY, AgentCommand, CommandKey, GetCommandKey, agent_subject
from bke.contracts.agent_steps import WriteFile
from bke.core.secrets import SecretBox, load_secret_box
from bke.core.secrets.at_rest import new_key
from bke.core.secrets.command_key_rollover import Rollover, announcement
from bke.core.plan import plan_spec_text
from bke.core.secrets.signing import CommandSigner, ensure_command_key, signed_command_bytes
from bke.core.state.schema import SCHEMA_FIELD, record_kind
from bke_agent.command_keys import KEYRING_FILE
from bke_cli.main import main as bke

from .agent_helpers import free_node_ip

pytestmark = pytest.mark.integration
TIMEOUT = 30.0
NODE = "master1"
OVERLAP_S = 20.0  # long enough for the overlap's checks on a loaded machine; the test then waits it out


def _now() -> datetime:
    return datetime.now(timezone.utc)


class Agent:
    """One lab node's real agent process, bootstrapped with a command key."""

    def __init__(self, nats_url: str, cluster: str, tmp: Path) -> None:
        self.root, self.tmp, self.runs = tmp / "hosts" / NODE, tmp, 0
        self.root.mkdir(parents=True)
        self.state = self.root / "var/lib/bke-agent"
        ip, _ = free_node_ip(1)
        self.env = dict(os.environ, BKE_NATS_URL=nats_url, BKE_AGENT_CLUSTER=cluster, BKE_AGENT_NODE=NODE,
                        BKE_AGENT_BACKEND="lab", BKE_AGENT_ROOT=str(self.root), BKE_AGENT_IP=ip,
                        BKE_AGENT_HEARTBEAT_S="0", BKE_AGENT_ACK_WAIT_S="5")
        self.proc: ManagedProcess | None = None

    def start(self) -> None:
        self.runs += 1
        self.proc = ManagedProcess.start("bke-agent", [Path(sys.executable).parent / "bke-agent", "run"],
                                         self.tmp / f"agent{self.runs}.log", env=self.env)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()
            self.proc = None


@pytest.fixture
def agent(nats_url: str, cluster: str, tmp_path: Path) -> Iterator[Agent]:
    a = Agent(nats_url, cluster, tmp_path)
    try:
        yield a
    finally:
        a.stop()


def _cmd(cluster: str, n: int) -> AgentCommand:
    step = WriteFile(id="write", path=f"/etc/kubernetes/pki/rollover-{n}", content_b64=base64.b64encode(b"x").decode(),
                     sha256="2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881")
    return AgentCommand(command_id=f"{cluster}/certs/{NODE}/{n}", cluster=cluster, node=NODE, phase="certs",
                        issued_at=_now().isoformat(), steps=[step])


def _answer(cid: str) -> Callable[[Seen], bool]:
    return lambda e: (e.subject.endswith((".result", ".refused")) and e.data.get("commandId") == cid)


class Sender:
    def __init__(self, js: JetStreamContext, watch: EventWatch, cluster: str) -> None:
        self.js, self.watch, self.subject = js, watch, agent_subject(cluster, NODE, "command")

    async def send(self, body: bytes) -> dict[str, Any]:
        """Publish a signed body; the agent's answer (a result or a refusal)."""
        cid = AgentCommand.model_validate_json(body).command_id
        before = {id(e) for e in self.watch.seen}  # a refused command's id may be sent again, signed right
        await self.js.publish(self.subject, body)
        seen = await self.watch.wait_for(lambda e: id(e) not in before and _answer(cid)(e), TIMEOUT)
        return {"kind": seen.subject.rpartition(".")[2], **seen.data}

    async def runs(self, body: bytes) -> None:
        answer = await self.send(body)
        assert answer["kind"] == "result" and answer["status"] == "Succeeded", answer

    async def refused(self, body: bytes, why: str) -> None:
        answer = await self.send(body)
        assert answer["kind"] == "refused" and why in answer["reason"], answer


async def _past(end: datetime) -> None:
    """Wait, under a deadline, until the wall clock the agent reads is past `end`."""
    deadline = asyncio.get_running_loop().time() + OVERLAP_S + TIMEOUT
    while _now() <= end:
        assert asyncio.get_running_loop().time() < deadline, f"the clock never passed {end}"
        await asyncio.sleep(0.1)  # the condition is the clock itself: nothing publishes its passing


async def test_an_agent_follows_a_rollover_of_the_command_key_through_its_overlap(
        nats_client: NatsClient, js: JetStreamContext, cluster: str, redis_client: Any, redis_url: str,
        operator_box: SecretBox, agent: Agent) -> None:
    r = Redis.from_url(redis_url)  # bytes, as the services read the sealed keys
    try:
        signing = CommandSigning(r, lambda: operator_box, reload_s=0.0)  # reads the stored key at every sign
        old = await signing.signer()
        agent.env["BKE_AGENT_COMMAND_KEY"] = old.verify_key.public_line
        async with EventWatch(nats_client, [f"bke.v1.agent.{cluster}.>"]) as watch:
            agent.start()
            await watch.wait_for(lambda e: e.subject.endswith(".registered"), TIMEOUT)
            s = Sender(js, watch, cluster)
            rollover = await start_rollover(r, operator_box, OVERLAP_S, _now())
            nxt = CommandSigner.from_store(await r.get(command_signing_next_key()), operator_box)
            assert nxt.key_id == rollover.next_key_id != old.key_id
            assert (await signing.signer()).key_id == old.key_id  # started, not switched: signers keep the old key

            # before the announcement: only the current key
            await s.refused(signed_command_bytes(_cmd(cluster, 1), nxt), "not the dispatcher key this agent trusts")
            await s.runs(await signing.sign_bytes(_cmd(cluster, 2)))
            # an announcement signed by any other key than the current one is refused
            intruder = CommandSigner.generate()
            forged = Rollover(intruder.verify_key.public_line, intruder.key_id, old.key_id,
                              rollover.previous_not_after, rollover.started_at)
            await s.refused(signed_command_bytes(announcement(forged, cluster, NODE, _now()), intruder),
                            "not the dispatcher key this agent trusts")
            await s.refused(signed_command_bytes(announcement(rollover, cluster, NODE, _now()), nxt),
                            "not the dispatcher key this agent trusts")
            assert not (agent.state / KEYRING_FILE).exists()

            # the announcement, signed by the current key: both keys run during the overlap
            await s.runs(await signing.sign_bytes(announcement(rollover, cluster, NODE, _now())))
            assert nxt.verify_key.public_line in (agent.state / KEYRING_FILE).read_text()
            await s.runs(await signing.sign_bytes(_cmd(cluster, 3)))
            await s.runs(signed_command_bytes(_cmd(cluster, 4), nxt))
            assert _now() < rollover.previous_not_after, "the overlap ended before its checks: raise OVERLAP_S"

            # the switch: the signer follows the stored key, without being made again
            await switch_rollover(r, operator_box, _now())
            assert (await signing.signer()).key_id == nxt.key_id
            assert (await read_rollover(r)) is not None

            # after the window: the old key is refused, the new one runs, also after a restart
            await _past(rollover.previous_not_after)
            await s.refused(signed_command_bytes(_cmd(cluster, 5), old), "retired at")
            await s.runs(await signing.sign_bytes(_cmd(cluster, 6)))
            agent.stop()
            agent.start()  # BKE_AGENT_COMMAND_KEY still names the old key: the keyring file wins
            await s.runs(await signing.sign_bytes(_cmd(cluster, 7)))
            await s.refused(signed_command_bytes(_cmd(cluster, 8), old), "retired at")
    finally:
        await r.aclose()


async def _cli(*argv: str) -> int:
    return await asyncio.to_thread(bke, list(argv))  # the CLI runs its own event loop


async def test_the_cli_starts_switches_and_finishes_a_rollover_in_order(
        redis_client: Any, redis_url: str, operator_key_file: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("BKE_KEY_FILE_SIGNING", str(operator_key_file))
    box = load_secret_box(operator_key_file)
    r = Redis.from_url(redis_url)
    try:
        old = await ensure_command_key(r, command_signing_key(), box)
        ck = ("keys", "command-key")
        assert await _cli(*ck, "switch", "--redis", redis_url) == 2  # nothing started
        assert await _cli(*ck, "start", "--overlap", "5m", "--redis", redis_url) == 2  # too short to reach a fleet
        assert await _cli(*ck, "start", "--overlap", "24h", "--redis", redis_url) == 0
        rollover = await read_rollover(r)
        assert rollover is not None and rollover.previous_key_id == old.key_id and rollover.stage == "announcing"
        assert await _cli(*ck, "start", "--overlap", "24h", "--redis", redis_url) == 2  # one at a time
        assert await _cli(*ck, "finish", "--redis", redis_url) == 2  # not switched yet
        await r.sadd(installs_index(), "c1")
        await r.hset(accepted_agents_key("c1"), "n1", "agent-1")  # an accepted agent that has not taken it
        assert await _cli(*ck, "switch", "--redis", redis_url) == 2
        assert CommandSigner.from_store(await r.get(command_signing_key()), box).key_id == old.key_id
        await r.hset(command_key_acks_key(), "c1/n1", rollover.next_key_id)  # what the dispatcher records
        assert await _cli(*ck, "status", "--redis", redis_url) == 0
        assert await _cli(*ck, "switch", "--redis", redis_url) == 0
        assert CommandSigner.from_store(await r.get(command_signing_key()), box).key_id == rollover.next_key_id
        assert not await r.exists(command_signing_next_key())
        assert await _cli(*ck, "status", "--redis", redis_url) == 0
        assert await _cli(*ck, "finish", "--redis", redis_url) == 0
        assert await read_rollover(r) is None
        out = capsys.readouterr().out
        assert rollover.next_public_line in out and "switched" in out and "1 of 1 accepted" in out
    finally:
        await r.aclose()


async def _until(check: Callable[[], Any], what: str) -> Any:
    deadline = asyncio.get_running_loop().time() + TIMEOUT
    while not (got := await check()):
        assert asyncio.get_running_loop().time() < deadline, what
        await asyncio.sleep(0.1)  # polling under a deadline: a Redis record has no event of its own
    return got


async def test_the_dispatcher_announces_the_next_key_to_accepted_agents_and_counts_their_answers(
        nats_url: str, nats_client: NatsClient, cluster: str, redis_client: Any, redis_url: str,
        operator_box: SecretBox, agent: Agent) -> None:
    r = Redis.from_url(redis_url)
    try:
        old = await ensure_command_key(r, command_signing_key(), operator_box)
        agent.env["BKE_AGENT_COMMAND_KEY"] = old.verify_key.public_line
        async with EventWatch(nats_client, [f"bke.v1.agent.{cluster}.>"]) as watch:
            agent.start()
            reg = await watch.wait_for(lambda e: e.subject.endswith(".registered"), TIMEOUT)
            # an installed cluster (its plan, its install record) and its accepted agent, as their owners
            # store them: the dispatcher believes only a result about a node of a cluster it installed
            await _installed(r, cluster)
            await r.hset(accepted_agents_key(cluster), NODE, reg.data["agentId"])
            rollover = await start_rollover(r, operator_box, OVERLAP_S * 30, _now())
            assert (await acknowledgements(r, rollover)) == ([], [f"{cluster}/{NODE}"])
            svc = await _start_dispatcher(nats_url, redis_url)
            try:
                done = await watch.wait_for(lambda e: e.subject.endswith(".result") and "/command-key/" in
                                            e.data.get("commandId", ""), TIMEOUT)
                assert done.data["status"] == "Succeeded", done.data
                await _until(lambda: r.hget(command_key_acks_key(), f"{cluster}/{NODE}"), "no acknowledgement recorded")
                assert (await acknowledgements(r, rollover)) == ([f"{cluster}/{NODE}"], [])
                assert rollover.next_public_line in (agent.state / KEYRING_FILE).read_text()

                await switch_rollover(r, operator_box, _now())

                async def answered_key() -> bool:  # the dispatcher's signer follows the switch (RELOAD_S)
                    msg = await nats_client.request(AGENTS_COMMAND_KEY, GetCommandKey().to_bytes(), timeout=5)
                    return CommandKey.model_validate_json(msg.data).key_id == rollover.next_key_id
                await _until(answered_key, "the dispatcher still answers the old key")
            finally:
                await svc.stop()
    finally:
        await r.aclose()


async def _installed(r: Redis, cluster: str) -> None:
    plan = plan_spec_text(open("examples/seed-3m1w.yaml").read().replace("name: seed", f"name: {cluster}")).plan
    assert plan is not None and NODE in {n.hostname for n in plan.nodes}
    pj = plan.to_json()
    assert await RedisPlanStore(r).save(plan, pj, plan_digest(pj), f"req-{cluster}", _now().isoformat())
    await r.hset(install_key(cluster), mapping={SCHEMA_FIELD: str(record_kind("install").current),
                                                "status": "Succeeded", "requestId": f"req-{cluster}"})
    await r.sadd(installs_index(), cluster)


async def _start_dispatcher(nats_url: str, redis_url: str) -> Any:
    """The real dispatcher (its `signing` key: BKE_SECRET_KEY_FILE, set by operator_box), its
    announcement rounds every half second."""
    from bke_dispatcher.app import create_service as create_dispatcher
    from bke_dispatcher.settings import DispatcherSettings

    svc = create_dispatcher(DispatcherSettings(nats_url=nats_url, redis_url=redis_url, owner="x", mode="lab",
                                               health_interval_s=0, command_key_announce_s=0.5))
    await svc.start()
    return svc


async def test_a_signer_follows_a_changed_record_it_can_open_and_keeps_its_key_while_it_cannot(
        redis_client: Any, redis_url: str, operator_box: SecretBox) -> None:
    r = Redis.from_url(redis_url)
    try:
        signing = CommandSigning(r, lambda: operator_box, reload_s=0.0)
        old = await signing.signer()
        elsewhere = CommandSigner.generate()  # sealed under an at-rest key this process does not hold
        await r.set(command_signing_key(), elsewhere.seal_for_store(SecretBox(new_key())))
        assert (await signing.signer()).key_id == old.key_id  # no failure: the key in use is kept
        nxt = CommandSigner.generate()
        await r.set(command_signing_key(), nxt.seal_for_store(operator_box))
        assert (await signing.signer()).key_id == nxt.key_id
        slow = CommandSigning(r, lambda: operator_box, clock=lambda: 0.0)  # its clock never reaches RELOAD_S
        assert (await slow.signer()).key_id == nxt.key_id
        await r.set(command_signing_key(), old.seal_for_store(operator_box))
        assert (await slow.signer()).key_id == nxt.key_id  # read again only every RELOAD_S: no GET per command
    finally:
        await r.aclose()
