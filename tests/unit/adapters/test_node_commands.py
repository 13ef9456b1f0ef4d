"""The upgrader's node commands to the dispatcher (bke.contracts.node_commands): packed into as few
messages as fit, each a SendNodeCommands the dispatcher reads; a batch that is not one
operation's unsigned commands of one cluster is refused naming the field."""
from __future__ import annotations

import pytest
from pydantic import ValidationError

from bke.adapters.bus.node_commands import NodeCommandsSender, packed
from bke.contracts.agent import AgentCommand
from bke.contracts.node_commands import NODE_COMMANDS_SEND, SendNodeCommands
from bke.contracts.operation_ref import OperationKind, OperationRef

REF = OperationRef(kind=OperationKind.UPGRADE, id="r1", step="workers")


def _cmd(node: str, cluster: str = "c1", **extra: object) -> AgentCommand:
    return AgentCommand(command_id=f"{cluster}/upgrade@r1@workers/{node}/0", cluster=cluster, node=node,
                        phase="upgrade:workers", issued_at="2026-01-02T00:00:00+00:00", steps=[], issuer="upgrader",
                        operation=REF, **extra)  # type: ignore[arg-type]


def test_a_batch_is_packed_under_the_limit_in_order_and_reads_back_whole() -> None:
    cmds = [_cmd(f"n{i}") for i in range(50)]
    limit = 4 * len(cmds[0].to_bytes()) + 300
    messages = list(packed(REF, cmds, limit))
    assert len(messages) > 1 and all(len(m) <= limit for m in messages)
    read = [SendNodeCommands.model_validate_json(m) for m in messages]
    assert all(r.cluster == "c1" and r.operation == REF for r in read)
    assert [c for r in read for c in r.commands] == cmds


def test_a_command_larger_than_the_limit_goes_alone() -> None:
    cmds = [_cmd("n1"), _cmd("n2")]
    assert [len(SendNodeCommands.model_validate_json(m).commands) for m in packed(REF, cmds, 10)] == [1, 1]


async def test_the_sender_publishes_on_the_dispatchers_subject() -> None:
    sent: list[tuple[bytes, str]] = []

    async def publish(body: bytes, subject: str, headers: dict[str, str]) -> None:
        sent.append((body, subject))

    await NodeCommandsSender(publish)(REF, [_cmd("n1"), _cmd("n2")])
    await NodeCommandsSender(publish)(REF, [])  # nothing to send: nothing published
    ((body, subject),) = sent
    assert subject == NODE_COMMANDS_SEND and len(SendNodeCommands.model_validate_json(body).commands) == 2


@pytest.mark.parametrize(("commands", "operation", "field"), [
    ([_cmd("n1"), _cmd("n2", cluster="c2")], REF, "commands[1].cluster"),
    ([_cmd("n1").model_copy(update={"signature_b64": "x"})], REF, "commands[0]: signed"),
    ([_cmd("n1").model_copy(update={"operation": OperationRef(kind=OperationKind.UPGRADE, id="r2")})], REF,
     "commands[0].operation"),
    ([_cmd("n1")], OperationRef(kind=OperationKind.ROTATION), "operation.kind"),
    ([], REF, "commands"),
])
def test_a_batch_of_another_form_is_refused_naming_the_field(commands: list[AgentCommand], operation: OperationRef,
                                                             field: str) -> None:
    # by the sender, before it goes, and by the dispatcher reading one that came all the same
    with pytest.raises(ValidationError, match=field.replace("[", r"\[").replace("]", r"\]")):
        list(packed(operation, commands))
    body = (b'{"operation":' + operation.to_bytes() + b',"commands":['
            + b",".join(c.to_bytes() for c in commands) + b"]}")
    with pytest.raises(ValidationError, match=field.replace("[", r"\[").replace("]", r"\]")):
        SendNodeCommands.model_validate_json(body)
