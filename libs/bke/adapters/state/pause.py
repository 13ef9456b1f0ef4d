"""A service's record that a person paused a cluster's operations (bke.contracts.pause).

One small hash per service (`bke.adapters.state.keys.shared.paused_key`), in that service's own record: the
reconcile loop (bke.adapters.runner) asks `is_paused` before each pass, one GET, and a resume kicks it.
"""
from __future__ import annotations

from typing import Any

from .keys.shared import paused_key

__all__ = ["PauseFlags"]


class PauseFlags:
    def __init__(self, redis: Any, owner: str):
        self.redis, self.owner = redis, owner

    async def set(self, cluster: str, paused: bool, reason: str, request_id: str, at: str) -> None:
        key = paused_key(cluster, self.owner)
        if paused:
            await self.redis.hset(key, mapping={"reason": reason, "requestId": request_id, "at": at})
        else:
            await self.redis.delete(key)

    async def is_paused(self, cluster: str) -> bool:
        return bool(await self.redis.exists(paused_key(cluster, self.owner)))

    async def reason(self, cluster: str) -> str | None:
        """Why it is paused (None: it is not)."""
        raw = await self.redis.hget(paused_key(cluster, self.owner), "reason")
        if raw is None:
            return None
        return raw.decode() if isinstance(raw, bytes) else str(raw)
