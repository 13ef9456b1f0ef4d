"""The upgrader's answers, sent on by the dispatcher several to a message (bke_dispatcher.answered):
those of one turn go together, in order, under the payload limit, straight on the connection;
what else a result's handler returned is left to the wiring to publish; a caller returns once
its answer went."""
from __future__ import annotations

import asyncio
from datetime import datetime, timezone

from bke_dispatcher.answered import SentOn

from bke.adapters.bus.handler import Out
from bke.contracts.agent import CommandResult
from bke.contracts.install import NodeStepChanged
from bke.contracts.node_commands import NODE_COMMANDS_ANSWERED, NodeCommandAnswered, NodeCommandsAnswered
from bke.contracts.operation_ref import OperationKind, OperationRef

NOW = datetime(2026, 1, 2, tzinfo=timezone.utc).isoformat()
REF = OperationRef(kind=OperationKind.UPGRADE, id="r1", step="workers")


def _answer(node: str, stderr: str = "") -> NodeCommandAnswered:
    res = CommandResult.model_validate({
        "commandId": f"c1/upgrade@r1@workers/{node}/0", "cluster": "c1", "node": node, "agentId": "a",
        "status": "Failed" if stderr else "Succeeded", "startedAt": NOW, "finishedAt": NOW,
        "steps": [{"id": "s", "status": "Failed", "stderr": stderr}] if stderr else []})
    return NodeCommandAnswered(operation=REF, result=res.model_copy(update={"operation": REF}))  # echoed


class _Notify:
    def __init__(self) -> None:
        self.sent: list[tuple[bytes, str, dict[str, str]]] = []

    async def __call__(self, body: bytes, subject: str, headers: dict[str, str]) -> None:
        self.sent.append((body, subject, headers))

    def answers(self) -> list[list[NodeCommandAnswered]]:
        assert {s for _, s, _ in self.sent} <= {NODE_COMMANDS_ANSWERED}
        return [NodeCommandsAnswered.model_validate_json(b).answers for b, _, _ in self.sent]


async def test_the_answers_of_one_turn_go_in_one_message_in_order() -> None:
    notify = _Notify()
    sent_on = SentOn(notify)
    answers = [_answer(f"n{i}") for i in range(20)]
    outs = await asyncio.gather(*(sent_on([Out(a, NODE_COMMANDS_ANSWERED)]) for a in answers))
    assert outs == [[]] * 20  # nothing left to publish
    assert notify.answers() == [answers]
    await sent_on([Out(_answer("n99"), NODE_COMMANDS_ANSWERED)])  # a later turn: a message of its own
    assert notify.answers()[1:] == [[_answer("n99")]]


async def test_a_turn_larger_than_one_message_comes_as_several_under_the_limit() -> None:
    notify = _Notify()
    answers = [_answer(f"n{i}", stderr="x" * 400) for i in range(16)]
    limit = 4 * len(answers[0].to_bytes()) + 200
    sent_on = SentOn(notify, limit)
    await asyncio.gather(*(sent_on([Out(a, NODE_COMMANDS_ANSWERED)]) for a in answers))
    assert len(notify.sent) > 1 and all(len(body) <= limit for body, _, _ in notify.sent)
    assert [a for part in notify.answers() for a in part] == answers


async def test_other_messages_are_returned_for_the_wiring_to_publish() -> None:
    notify = _Notify()
    ev = NodeStepChanged(request_id="r", cluster="c1", node="n1", phase="etcd", status="Succeeded", at=NOW)
    other = Out(ev, "bke.v1.install.c1.node", live=True)
    assert await SentOn(notify)([other]) == [other] and notify.sent == []


class _Agents:
    """The dispatcher's accepted agents, counting its reads."""

    def __init__(self, accepted: dict[str, str], incarnation: str | None = None) -> None:
        self.accepted, self.incarnation, self.reads = accepted, incarnation, []

    async def results_checks(self, cluster: str, nodes: list[str], incarnation: bool) -> tuple[list[str | None], str | None]:
        self.reads.append((cluster, nodes, incarnation))
        return [self.accepted.get(n) for n in nodes], self.incarnation if incarnation else None


async def test_the_upgrader_s_results_of_one_turn_are_checked_in_one_read_each_judged_on_its_own() -> None:
    from bke_dispatcher.results import Inputs

    from bke.adapters.operation import Operations

    async def on_health(res: CommandResult) -> None:
        raise AssertionError("not a health round's")

    agents = _Agents({f"n{i}": "a" for i in range(5)} | {"n5": "other"}, incarnation="i2")
    inputs = Inputs(agents, lambda cluster, at_once=False: None, lambda: datetime.now(timezone.utc), on_health,  # type: ignore[arg-type]
                    Operations())
    answers = [_answer(f"n{i}") for i in range(7)]  # n5: another agent's node; n6: none accepted
    answers[4] = answers[4].model_copy(update={"result": answers[4].result.model_copy(update={"incarnation": "i1"})})
    outs = await asyncio.gather(*(inputs.result(a.result) for a in answers))
    assert agents.reads == [("c1", [f"n{i}" for i in range(7)], True)]  # one read for the seven
    assert outs[:4] == [[Out(a, NODE_COMMANDS_ANSWERED)] for a in answers[:4]]
    assert outs[4:] == [[], [], []]  # another incarnation's, another agent's, no agent's: dropped
    assert inputs.other_incarnation.count == 1 and inputs.dropped.count == 2
