"""A service's node commands, sent through the dispatcher (bke.contracts.node_commands): as few
`SendNodeCommands` messages as fit under the payload limit, each checked by its model before it
goes (a batch that is not one operation's unsigned commands of one cluster fails here, in the
sender, naming the field).

Why halved rather than measured: a batch (bke_upgrader.batches.SEND_CHUNK) fits in one message
as a rule, so each command is written once; one that does not is cut in two until each part fits
(`fitted`, which the dispatcher's answers sent on to the upgrader go through as well).
"""
from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import TypeVar

from bke.contracts.agent import AgentCommand
from bke.contracts.node_commands import NODE_COMMANDS_SEND, SendNodeCommands
from bke.contracts.operation_ref import OperationRef
from bke.adapters.bus.handler import Publish

__all__ = ["MESSAGE_BYTES", "NodeCommandsSender", "SendCommands", "fitted", "packed"]

# Under NATS' default 1 MiB max_payload, with room for the headers; a command larger than this
# goes alone (it could not reach its agent either if it were over the limit).
MESSAGE_BYTES = 768 * 1024
# (operation, its commands) -> sent: what an operation that sends through the dispatcher is given
SendCommands = Callable[[OperationRef, Sequence[AgentCommand]], Awaitable[None]]
T = TypeVar("T")


def fitted(body_of: Callable[[list[T]], bytes], items: Sequence[T], limit: int = MESSAGE_BYTES) -> Iterator[bytes]:
    """The bodies (`body_of` a part of `items`) that carry `items`, in order, each under
    `limit` bytes but for an item alone over it."""
    body = body_of(list(items))
    if len(body) <= limit or len(items) == 1:
        yield body
        return
    half = len(items) // 2
    yield from fitted(body_of, items[:half], limit)
    yield from fitted(body_of, items[half:], limit)


def packed(ref: OperationRef, commands: Sequence[AgentCommand], limit: int = MESSAGE_BYTES) -> Iterator[bytes]:
    """The bodies of the SendNodeCommands messages that carry these commands, in order."""
    return fitted(lambda part: SendNodeCommands(operation=ref, commands=part).to_bytes(), commands, limit)


class NodeCommandsSender:
    """`SendCommands` over a service's publish: the commands of one cluster, to the dispatcher."""

    def __init__(self, publish: Publish, limit: int = MESSAGE_BYTES) -> None:
        self.publish, self.limit = publish, limit

    async def __call__(self, ref: OperationRef, commands: Sequence[AgentCommand]) -> None:
        if not commands:
            return
        for body in packed(ref, commands, self.limit):
            await self.publish(body, NODE_COMMANDS_SEND, {})
