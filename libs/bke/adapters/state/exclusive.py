"""Start an operation's record only if no other is running: one WATCH/MULTI transaction, so two
replicas starting at the same time cannot both win (certificate rotations, upgrades)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import WatchError

__all__ = ["write_unless"]


async def write_unless(redis: Redis, key: str, check: Callable[[Any], str], write: Callable[[Any], None]) -> str:
    """`check(current raw value of key)` says why not ("" to go on); then `write(pipeline)` queues
    the writes, executed atomically unless `key` changed meanwhile (then all of it again).
    Returns the refusal, "" when written."""
    async with redis.pipeline(transaction=True) as pipe:
        while True:
            try:
                await pipe.watch(key)
                why = check(await pipe.get(key))
                if why:
                    await pipe.unwatch()
                    return why
                pipe.multi()
                write(pipe)
                await pipe.execute()
                return ""
            except WatchError:
                continue
