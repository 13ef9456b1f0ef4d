"""The upgrader's node commands, signed and sent here (bke.contracts.node_commands): the dispatcher
is the one service that talks to agents. Its answers come back through results.py, which sends
them on to the upgrader by the operation they echo.

Each command is bound to its node's agent and signed as the dispatcher's own are
(bke.adapters.state.command_signing: the bindings of a batch read in one round trip first), and
published on its node's command subject with its id as the message id: a batch taken again (a
redelivery, or the upgrader sending it again after a crash) publishes the same ids, which
JetStream drops, and an agent that completed one only replays its answer. What happens to it
then is the dispatcher's as for any command: an agent's refusal is counted in the cluster's
status, an answer on another node's subject or to no command in flight is dropped and counted
(the result consumers' guards). How long the upgrader waits for the answers is its own (its run
record's answer deadline)."""
from __future__ import annotations

import asyncio

from bke.adapters.bus.handler import typed
from bke.contracts.agent import agent_subject
from bke.contracts.node_commands import NODE_COMMANDS_SEND, SendNodeCommands

from .basics import Basics
from .forgotten import Forgotten

__all__ = ["PREFETCH_CHUNK", "SEND_YIELD_EVERY", "serve_node_commands"]

PREFETCH_CHUNK = 500  # commands whose bindings are read in one round trip
SEND_YIELD_EVERY = 32  # commands signed between two turns of the event loop


def serve_node_commands(b: Basics, forgotten: Forgotten) -> None:
    # each command stored before the batch counts as sent (Service.publish, bke.adapters.bus.
    # stored_publish: a core publish is dropped while BKE_AGENT elects a leader); a chunk's
    # publishes wait for their PubAcks side by side, as the install sends a chunk
    signing, publish = b.signing, b.svc.publish

    async def send(req: SendNodeCommands) -> None:
        if await forgotten(req.cluster):
            return  # a deleted cluster's: its agents take no new command
        nodes = [c.node for c in req.commands]
        for start in range(0, len(req.commands), PREFETCH_CHUNK):
            await signing.prefetch(req.cluster, nodes[start:start + PREFETCH_CHUNK])
            sends = []
            for i, cmd in enumerate(req.commands[start:start + PREFETCH_CHUNK]):
                body = await signing.sign_bytes(cmd.model_copy(update={"operation": req.operation}))
                sends.append(publish(body, agent_subject(cmd.cluster, cmd.node, "command"), {"Nats-Msg-Id": cmd.command_id}))
                if i % SEND_YIELD_EVERY == SEND_YIELD_EVERY - 1:
                    await asyncio.sleep(0)  # results are handled meanwhile
            await asyncio.gather(*sends)

    # a few batches at once: each signs its commands in turn, and their Redis reads overlap
    b.svc.fast_subscriber(NODE_COMMANDS_SEND, "BKE_COMMANDS", "dispatcher-node-commands",
                          typed(SendNodeCommands, send, b.publish, b.notify), workers=4)
