"""The clusters deleted since this process started: their agents still beat, and late answers
(a health round's) still come, until their identities are revoked; none of it writes a key back."""
from __future__ import annotations

from redis.asyncio import Redis

from bke.adapters.state.plans import plan_exists

__all__ = ["Forgotten"]


class Forgotten:
    def __init__(self, redis: Redis):
        self.redis = redis
        self.deleted: set[str] = set()

    def add(self, cluster: str) -> None:
        self.deleted.add(cluster)

    async def __call__(self, cluster: str) -> bool:
        """Whether a message of `cluster` is one of a deleted cluster's, to drop without a write."""
        if cluster not in self.deleted:
            return False
        if await plan_exists(self.redis, cluster):
            self.deleted.discard(cluster)  # planned again under the same name
            return False
        return True
