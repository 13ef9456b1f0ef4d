"""Carrying a command-key rollover to every accepted agent (bke.core.secrets.command_key_rollover):
the dispatcher is the one service that sends agents commands, so it sends the announcement.

    a round        every `every_s` while a rollover is announcing and its window is open: each
                   accepted agent (`bke:<c>:agents:accepted`) of each installed cluster
                   (`bke:installs`) that has not acknowledged the next key is sent the
                   announcement, signed by the current key like every command (CommandSigning)
    an answer      a Succeeded result of an announcement is the node's acknowledgement:
                   `bke:command-key-rollover:acks` "<cluster>/<node>" -> the key id it took,
                   which `bke keys command-key status` and `switch` read

Idempotent: one command id per node and rollover (the stream's Nats-Msg-Id window, then the
agent's journal, answer a second send); replicas may each send it, and it runs once. A round
that fails (Redis away) is logged and the next one tries again.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime

from redis.asyncio import Redis

from bke.adapters.state.command_signing import SignBytes
from bke.adapters.state.keys.dispatcher import accepted_agents_key, command_key_acks_key, installs_index
from bke.adapters.state.keys.trust import command_key_rollover_key
from bke.contracts.agent import CommandResult, agent_subject
from bke.contracts.statuses import FinishedStatus, StepResultStatus
from bke.core.secrets.command_key_rollover import Rollover, acked_key_id, announcement
from bke.adapters.bus.handler import Publish

__all__ = ["ANNOUNCE_EVERY_S", "CommandKeyCarrier"]

log = logging.getLogger("bke.dispatcher.command_key")
ANNOUNCE_EVERY_S = 30.0  # how soon an agent that was away is sent the announcement again


def _text(v: object) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class CommandKeyCarrier:
    def __init__(self, redis: Redis, sign: SignBytes, publish: Publish, now: Callable[[], datetime],
                 every_s: float = ANNOUNCE_EVERY_S) -> None:
        self.redis, self.sign, self.publish, self.now, self.every_s = redis, sign, publish, now, every_s

    async def round(self) -> int:
        """Send the announcement to every accepted agent that has not taken it; how many were sent."""
        raw = await self.redis.get(command_key_rollover_key())
        if raw is None:
            return 0
        rollover, now = Rollover.from_json(raw), self.now()
        if rollover.stage != "announcing" or rollover.seconds_left(now) <= 0:
            return 0  # switched (nothing left to tell), or too late (the old key is refused already)
        acks = await self.redis.hgetall(command_key_acks_key())
        done = {_text(k) for k, v in acks.items() if _text(v) == rollover.next_key_id}
        sent = 0
        for cluster in sorted(_text(c) for c in await self.redis.smembers(installs_index())):
            for node in sorted(_text(n) for n in await self.redis.hkeys(accepted_agents_key(cluster))):
                if f"{cluster}/{node}" in done:
                    continue
                cmd = announcement(rollover, cluster, node, now)
                await self.publish(await self.sign(cmd), agent_subject(cluster, node, "command"),
                                   {"Nats-Msg-Id": cmd.command_id})
                sent += 1
        return sent

    async def on_result(self, res: CommandResult, gen: int) -> None:
        """An announcement's answer (already believed: from the node's accepted agent)."""
        key_id = acked_key_id(gen)
        if res.status == FinishedStatus.SUCCEEDED and key_id is not None:
            await self.redis.hset(command_key_acks_key(), f"{res.cluster}/{res.node}", key_id)
        elif res.status != FinishedStatus.SUCCEEDED:
            step = next((s for s in res.steps if s.status == StepResultStatus.FAILED), None)
            log.warning("command-key announcement failed: %s", step.stderr[-300:] if step else "",
                        extra={"cluster": res.cluster, "node": res.node, "command_id": res.command_id})

    async def run(self, stopping: Callable[[], bool]) -> None:
        while not stopping():
            try:
                if sent := await self.round():
                    log.info("command-key announcement sent to %d agent(s)", sent)
            except Exception as exc:  # noqa: BLE001 - a round is tried again; the service keeps running
                log.warning("command-key round failed (%s: %s); trying again", type(exc).__name__, exc)
            await asyncio.sleep(self.every_s)  # the period itself
