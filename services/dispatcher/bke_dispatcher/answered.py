"""The agents' answers that results.py sends on to the upgrader, several to a message
(bke.contracts.node_commands, `NodeCommandsAnswered`).

The result consumer handles a fetch's results at once: the answers believed in the same turn go
out together (bke.adapters.coalesce), in as few messages as fit under the payload limit
(bke.adapters.bus.node_commands.fitted), each stored before it returns (Service.publish: a core
publish is dropped while the commands' stream elects a leader, and the upgrader would wait for
an answer that never comes). Each result's handler returns once its answer was stored, so its
delivery is acked after:
a dispatcher that stops in between leaves the result to be delivered again, and the upgrader
records an answer that comes twice once (its store). Why: one message per answer was most of
what forwarding cost the dispatcher (15,000 of them in a 5,000-node upgrade).
"""
from __future__ import annotations

from collections.abc import Sequence

from bke.adapters.bus.handler import Out, Publish
from bke.adapters.bus.node_commands import MESSAGE_BYTES, fitted
from bke.adapters.coalesce import Coalesced
from bke.contracts.node_commands import NODE_COMMANDS_ANSWERED, NodeCommandAnswered, NodeCommandsAnswered

__all__ = ["SentOn"]


class SentOn:
    """What a result's handler returned, less the answers for the upgrader, which it sends."""

    def __init__(self, publish: Publish, limit: int = MESSAGE_BYTES) -> None:
        self.publish, self.limit = publish, limit
        self._send: Coalesced[None, NodeCommandAnswered, None] = Coalesced(self._send_all)

    async def __call__(self, outs: Sequence[Out]) -> list[Out]:
        rest = []
        for out in outs:
            if isinstance(out.message, NodeCommandAnswered):
                await self._send(None, out.message)
            else:
                rest.append(out)
        return rest

    async def _send_all(self, _: None, answers: list[NodeCommandAnswered]) -> list[None]:
        for body in fitted(lambda part: NodeCommandsAnswered(answers=part).to_bytes(), answers, self.limit):
            await self.publish(body, NODE_COMMANDS_ANSWERED, {})
        return [None] * len(answers)
