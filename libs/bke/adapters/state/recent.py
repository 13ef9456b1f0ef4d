"""A bounded list of a service's last answers, newest first, for its dashboard (the planner's
plans and rejections, the renderer's renders): `RecentLog(redis, key).add(entry)`.

Advisory: the truth is in the service's records and events; this list only lets a page show
what happened lately without scanning them. So a write that fails is logged and dropped (a
handler never fails, nor is redelivered, because its dashboard line could not be written), and
each entry names its own form (`v`), so that a reader skips an entry it does not know.
"""
from __future__ import annotations

import json
import logging
from typing import Any

from redis.asyncio import Redis

__all__ = ["RECENT_KEEP", "RECENT_VERSION", "RecentLog"]

log = logging.getLogger("bke.adapters.state.recent")
RECENT_KEEP = 200  # entries kept: a page's worth of history, a few hundred KB at most
RECENT_VERSION = 1
TEXT_KEEP = 500  # characters kept of any one string (an error message, a warning)
ITEMS_KEEP = 20  # items kept of any one list (errors, warnings)


def _bounded(value: Any) -> Any:
    if isinstance(value, str):
        return value[:TEXT_KEEP]
    if isinstance(value, list):
        return [_bounded(v) for v in value[:ITEMS_KEEP]]
    if isinstance(value, dict):
        return {str(k)[:TEXT_KEEP]: _bounded(v) for k, v in value.items()}
    return value


class RecentLog:
    def __init__(self, redis: Redis, key: str, keep: int = RECENT_KEEP):
        self.redis, self.key, self.keep = redis, key, keep

    async def add(self, entry: dict[str, Any]) -> bool:
        """Push `entry` (strings and lists bounded); whether it was written."""
        doc = json.dumps({"v": RECENT_VERSION, **_bounded(entry)}, separators=(",", ":"))
        try:
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.lpush(self.key, doc)
                pipe.ltrim(self.key, 0, self.keep - 1)
                await pipe.execute()
        except Exception as exc:  # noqa: BLE001 - advisory (module docstring): never fail the handler
            log.warning("recent list %s not written: %s: %s", self.key, type(exc).__name__, exc,
                        extra={"rate_key": f"recent:{self.key}"})
            return False
        return True

    async def read(self, limit: int = RECENT_KEEP) -> list[dict[str, Any]]:
        """The newest `limit` entries of a form this code knows."""
        out = []
        for raw in await self.redis.lrange(self.key, 0, max(0, limit - 1)):
            try:
                doc = json.loads(raw)
            except ValueError:
                continue
            if isinstance(doc, dict) and doc.get("v") == RECENT_VERSION:
                out.append(doc)
        return out
