"""Whose answer the upgrader records is decided here, by the dispatcher, on a real Redis
(bke_dispatcher.results with its own DispatcherState): an agent's answer to an upgrade command
is sent on (`bke.v1.node-commands.answered`) only from the node's accepted agent, as the accepted
agents are when it arrives; a forged one (another agent, a node with none accepted, an answer
naming another node) is dropped and counted, and never reaches the upgrader, which takes what is
sent on as believed (bke_upgrader.results)."""
from __future__ import annotations

import asyncio
from datetime import datetime, timezone

import pytest
from redis import asyncio as aioredis

from bke.adapters.bus.handler import Out
from bke.adapters.operation import Operations
from bke.contracts.agent import CommandResult
from bke.contracts.node_commands import NODE_COMMANDS_ANSWERED, NodeCommandAnswered
from bke.contracts.operation_ref import OperationKind, OperationRef
from bke_dispatcher.results import Inputs
from bke_dispatcher.state import DispatcherState

pytestmark = pytest.mark.integration
C = "c1"
NOW = datetime(2026, 1, 2, tzinfo=timezone.utc)
REF = OperationRef(kind=OperationKind.UPGRADE, id="r1", step="workers")


def _answer(node: str, agent: str, named: str | None = None) -> CommandResult:
    return CommandResult.model_validate({
        "commandId": f"{C}/upgrade@r1@workers/{named or node}/0", "cluster": C, "node": node, "agentId": agent,
        "status": "Succeeded", "startedAt": NOW.isoformat(), "finishedAt": NOW.isoformat(), "steps": [],
        "operation": REF.model_dump(by_alias=True)})


async def _health(res: CommandResult) -> None:
    raise AssertionError("not a health round's")


async def test_only_the_accepted_agent_s_answer_is_sent_on_to_the_upgrader(redis_client: aioredis.Redis) -> None:
    state = DispatcherState(redis_client)
    await state.accept_agents(C, {**{f"n{i}": "a" for i in range(4)}, "n4": "other"})  # from certs.sealed
    inputs = Inputs(state, lambda cluster, at_once=False: None, lambda: NOW, _health, Operations())
    answers = [_answer(f"n{i}", "a") for i in range(6)]  # n4: another agent's node; n5: none accepted
    answers.append(_answer("n1", "a", named="n2"))  # its command id names another node
    outs = await asyncio.gather(*(inputs.result(res) for res in answers))
    assert outs[:4] == [[Out(NodeCommandAnswered(operation=REF, result=res), NODE_COMMANDS_ANSWERED)]
                        for res in answers[:4]]
    assert outs[4:] == [[], [], []] and inputs.dropped.count == 3

    # certs seals n1's bundle to a new agent: from then on the old agent's answers are not sent on
    await state.accept_agents(C, {"n1": "b"})
    assert await inputs.result(_answer("n1", "a")) == [] and inputs.dropped.count == 4
    assert await inputs.result(_answer("n1", "b")) != []


async def test_the_install_s_loop_goes_on_at_once_after_the_last_answer_of_a_phase(redis_client: aioredis.Redis) -> None:
    """Each believed answer to an install command wakes the install's loop; the one that
    completes its phase wakes it at once (no coalescing window: nothing more is awaited)."""
    state = DispatcherState(redis_client)
    await state.accept_agents(C, {"n0": "a", "n1": "a"})
    await state.set_phase(C, "etcd", total=2)
    await state.mark_sent(C, "etcd", {n: {"id": f"{C}/etcd/{n}/0", "gen": 0, "status": "Sent", "step": "",
                                          "stderr": "", "at": "t"} for n in ("n0", "n1")}, 2, "t")
    kicks: list[tuple[str, bool]] = []
    inputs = Inputs(state, lambda cluster, at_once=False: kicks.append((cluster, at_once)), lambda: NOW, _health,
                    Operations())
    ref = OperationRef(kind=OperationKind.INSTALL, id="i1", step="etcd")

    def answer(node: str) -> CommandResult:
        return CommandResult.model_validate({
            "commandId": f"{C}/etcd/{node}/0", "cluster": C, "node": node, "agentId": "a", "status": "Succeeded",
            "startedAt": NOW.isoformat(), "finishedAt": NOW.isoformat(), "steps": [],
            "operation": ref.model_dump(by_alias=True)})

    await inputs.result(answer("n0"))
    assert kicks == [(C, False)]
    await inputs.result(answer("n1"))
    assert kicks == [(C, False), (C, True), (C, False)]
