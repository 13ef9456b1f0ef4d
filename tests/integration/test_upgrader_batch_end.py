"""A batch's two ends, on real Redis and NATS: its commands leave while the rest are built (the
event loop gets a turn every SEND_YIELD_EVERY commands), and the answer that completes it wakes
the next pass at once (the runner's coalescing window skipped), while the earlier answers of
the batch, and any answer the upgrader has no hint for, kick the runner the ordinary way."""
from __future__ import annotations

import asyncio
import base64

import pytest
from nats.aio.client import Client as NatsClient
from redis import asyncio as aioredis

from bke.contracts.agent import AgentCommand, CommandResult

from ..unit.upgrade_helpers import SPLIT, plan_of
from .test_upgrader_permanent_failure import _stored_run, _upgrades

pytestmark = pytest.mark.integration


class _Snapshots:
    async def recipient(self) -> str:
        return base64.b64encode(bytes(32)).decode()  # an X25519 public key's form


def _answer(cmd: AgentCommand) -> CommandResult:
    return CommandResult.model_validate({"commandId": cmd.command_id, "cluster": cmd.cluster, "node": cmd.node,
                                         "agentId": f"agent-{cmd.node}", "status": "Succeeded", "steps": [],
                                         "startedAt": "t0", "finishedAt": "t1"})


async def test_the_batch_s_last_answer_kicks_at_once_and_the_others_ordinarily(
        redis_client: aioredis.Redis, nats_client: NatsClient) -> None:
    plan = plan_of(SPLIT)
    store = await _stored_run(redis_client, plan)
    hosts = [n.hostname for n in plan.nodes]
    sent: list[AgentCommand] = []

    async def sign(cmd: AgentCommand) -> bytes:
        sent.append(cmd)
        return cmd.to_bytes()

    upgrades = _upgrades(store, redis_client, nats_client, sign)
    upgrades.commands.snapshots = _Snapshots()  # the step after the agents one asks for its key
    kicks: list[tuple[str, str]] = []
    upgrades.kick = lambda c: kicks.append(("kick", c))
    upgrades.kick_at_once = lambda c: kicks.append(("at once", c))

    assert (await upgrades.reconcile(plan.cluster)).status == "wait"  # pre-checks done, the agents batch sent
    agents = [c for c in sent if c.phase == "upgrade:agents"]
    assert sorted(c.node for c in agents) == sorted(hosts)  # 100%: one batch of every node
    # an answer from outside the batch (another upgrade's id) is an ordinary kick
    stray = agents[0].model_copy(update={"command_id": agents[0].command_id.replace("@r1@", "@r0@")})
    await upgrades.on_result(_answer(stray))
    for cmd in agents:
        await upgrades.on_result(_answer(cmd))
    assert kicks == [("kick", plan.cluster)] * len(agents) + [("at once", plan.cluster)]

    # the pass that folds them moves to the next step; a replayed answer of the old batch is ordinary
    assert (await upgrades.reconcile(plan.cluster)).status == "wait"
    run = await store.load(plan.cluster)
    assert run is not None and next(s for s in run.steps if s.name == "agents").status == "Succeeded"
    kicks.clear()
    await upgrades.on_result(_answer(agents[0]))
    assert kicks == [("kick", plan.cluster)]


async def test_a_batch_s_commands_leave_while_the_rest_are_built(
        redis_client: aioredis.Redis, nats_client: NatsClient) -> None:
    from bke.core.plan import plan_spec_text
    from bke.core.spec.synth import synth_spec_text
    from bke_upgrader.batches import SEND_YIELD_EVERY

    plan = plan_spec_text(synth_spec_text(SEND_YIELD_EVERY + 8, name="yields")).plan
    store = await _stored_run(redis_client, plan)
    order: list[str] = []
    loop = asyncio.get_running_loop()

    async def sign(cmd: AgentCommand) -> bytes:
        return cmd.to_bytes()

    upgrades = _upgrades(store, redis_client, nats_client, sign)
    real_publish = upgrades.commands.publish

    async def publish(payload: bytes, subject: str, headers: dict[str, str]) -> None:
        if subject.endswith(".command"):
            if not order:  # the first command: what the event loop would run next is noted when it runs
                loop.call_soon(order.append, "a turn of the loop")
            order.append("command")
        await real_publish(payload, subject, headers)

    upgrades.commands.publish = publish
    assert (await upgrades.reconcile(plan.cluster)).status == "wait"  # the agents batch: every node
    assert order.count("command") == len(plan.nodes)
    # the loop ran (nats-py's flusher would write) after the first SEND_YIELD_EVERY commands,
    # not only once the whole batch was built
    assert order.index("a turn of the loop") == SEND_YIELD_EVERY
