"""A service's node commands, sent through the dispatcher (bke.contracts.node_commands): packed
into as few `SendNodeCommands` messages as fit under the payload limit.

Why packed by hand: the commands are serialized once, as they are built, and their bodies are
joined into the message's JSON (the form `SendNodeCommands.to_bytes` writes: camelCase, the
commands as they are); at 5,000 nodes a batch is thousands of commands of a few KB each, and a
model of the whole message would write each of them again.
"""
from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterator, Sequence

from bke.contracts.agent import AgentCommand
from bke.contracts.node_commands import NODE_COMMANDS_SEND
from bke.contracts.operation_ref import OperationRef

__all__ = ["MESSAGE_BYTES", "NodeCommandsSender", "SendCommands", "packed"]

# Under NATS' default 1 MiB max_payload, with room for the headers; a command larger than this
# goes alone (it could not reach its agent either if it were over the limit).
MESSAGE_BYTES = 768 * 1024
# (operation, its commands) -> sent: what an operation that sends through the dispatcher is given
SendCommands = Callable[[OperationRef, Sequence[AgentCommand]], Awaitable[None]]
Publish = Callable[[bytes, str, dict[str, str]], Awaitable[None]]


def packed(cluster: str, ref: OperationRef, bodies: Sequence[bytes], limit: int = MESSAGE_BYTES) -> Iterator[bytes]:
    """The bodies of the SendNodeCommands messages that carry these command bodies, in order."""
    head = b'{"cluster":' + json.dumps(cluster).encode() + b',"operation":' + ref.to_bytes() + b',"commands":['
    part: list[bytes] = []
    size = len(head) + 2
    for body in bodies:
        if part and size + len(body) + 1 > limit:
            yield head + b",".join(part) + b"]}"
            part, size = [], len(head) + 2
        part.append(body)
        size += len(body) + 1
    if part:
        yield head + b",".join(part) + b"]}"


class NodeCommandsSender:
    """`SendCommands` over a service's publish: the commands of one cluster, to the dispatcher."""

    def __init__(self, publish: Publish, limit: int = MESSAGE_BYTES) -> None:
        self.publish, self.limit = publish, limit

    async def __call__(self, ref: OperationRef, commands: Sequence[AgentCommand]) -> None:
        if not commands:
            return
        cluster = commands[0].cluster
        for body in packed(cluster, ref, [c.to_bytes() for c in commands], self.limit):
            await self.publish(body, NODE_COMMANDS_SEND, {})
