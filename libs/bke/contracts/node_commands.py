"""The node commands of the operations the upgrader runs, through the dispatcher: the one service
that talks to agents signs and sends them, and hears the answers.

    bke.v1.node-commands.send       upgrader -> dispatcher   a batch of one operation's commands,
                                                            unsigned: the dispatcher binds each to
                                                            its node's agent, signs it with the
                                                            deployment's command key and sends it
    bke.v1.node-commands.answered   dispatcher -> upgrader   agents' answers to commands of the
                                                            operations the upgrader runs (an
                                                            upgrade, a changed spec, an etcd
                                                            restore), several to a message

Why through the dispatcher: one service holds the command-signing key and hears agents, so one
service keeps each conversation with a node (its bindings, refusals, floods, misaddressed
outputs); the upgrader orchestrates and holds no key that commands a node.

The dispatcher reads every agent result (`bke.v1.agent.<cluster>.<node>.result`), believes it by
its rule (the node's subject, its accepted agent, the cluster's incarnation: its results.py) and
routes it by the operation it answers (bke.contracts.operation_ref): its own operations' it
folds, the others' it sends on to their owner here, in the commands' stream (a work queue: taken
by one replica of the owner, gone once taken). The answers it believed together (the results of
one fetch that it handled at once) go in one message: 15,000 answers in a 5,000-node upgrade,
each a message of its own, cost the dispatcher more than their checks did. The upgrader may
take them as believed: only the dispatcher may publish this subject (bke.adapters.auth.permissions,
from the channel's senders).
"""
from __future__ import annotations

from typing import Self

from pydantic import Field, model_validator

from .agent import AgentCommand, CommandResult
from .base import Message
from .channel import Channel
from .operation_ref import UPGRADER_KINDS, OperationRef

__all__ = ["CHANNELS", "NODE_COMMANDS_ANSWERED", "NODE_COMMANDS_SEND", "NodeCommandAnswered", "NodeCommandsAnswered",
           "SendNodeCommands"]

NODE_COMMANDS_SEND = "bke.v1.node-commands.send"
NODE_COMMANDS_ANSWERED = "bke.v1.node-commands.answered"


class SendNodeCommands(Message):
    """Command: sign these commands and send each to its node's agent. Unsigned (no key id,
    binding or signature: the dispatcher adds them), all of one cluster and of `operation` (its
    own `operation` left out or the same). As many commands as fit in one message: a batch of
    thousands comes as several."""

    operation: OperationRef
    commands: list[AgentCommand] = Field(min_length=1)

    @property
    def cluster(self) -> str:
        return self.commands[0].cluster

    @model_validator(mode="after")
    def _one_operation(self) -> Self:
        if self.operation.kind not in UPGRADER_KINDS:
            raise ValueError(f"operation.kind: {self.operation.kind} is not an operation the upgrader runs")
        for i, cmd in enumerate(self.commands):
            if cmd.cluster != self.commands[0].cluster:
                raise ValueError(f"commands[{i}].cluster: {cmd.cluster!r} is not commands[0]'s {self.commands[0].cluster!r}")
            if cmd.operation not in (None, self.operation):
                raise ValueError(f"commands[{i}].operation: not the batch's operation")
            if cmd.signature_b64 or cmd.key_id or cmd.agent_id is not None:
                raise ValueError(f"commands[{i}]: signed or bound already (the dispatcher signs and binds)")
        return self


class NodeCommandAnswered(Message):
    """An agent's believed answer, as the agent sent it, and the operation it answers (the one
    the agent echoed, or for an agent of an earlier release, the one its command id names)."""

    operation: OperationRef
    result: CommandResult


class NodeCommandsAnswered(Message):
    """Event: agents' believed answers to commands of operations the upgrader runs, each with the
    operation it answers, in the order the dispatcher believed them. As many as fit in one
    message (a larger batch comes as several); of any clusters."""

    answers: list[NodeCommandAnswered] = Field(min_length=1)


CHANNELS: tuple[Channel, ...] = (
    Channel(NODE_COMMANDS_SEND, SendNodeCommands, "command", "A batch of node commands of an operation the upgrader runs (an upgrade, a changed spec, an etcd restore), unsigned: the dispatcher binds, signs and sends each to its node's agent.", ("upgrader",), ("dispatcher",)),
    # an event kept with the commands: for one service, taken once (a work queue)
    Channel(NODE_COMMANDS_ANSWERED, NodeCommandsAnswered, "event", "Agents' believed answers to commands of the operations the upgrader runs (an upgrade, a changed spec, an etcd restore), each with the operation it answers; those the dispatcher believed together in one message (commands' stream: taken by one upgrader replica).", ("dispatcher",), ("upgrader",),
            stored="commands"),
)
