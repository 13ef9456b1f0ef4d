"""The certs service's PKI read cache on a real Redis: served from memory while the stored
version holds, and bounded to the clusters used last (a soak grew the process per cluster)."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from redis.asyncio import Redis

from bke.adapters.pki.store_redis import pki_keys
from bke.core.secrets import SecretBox
from bke_certs.cache import CachedPkiStore

pytestmark = pytest.mark.integration


class CountingStore:
    """The inner store: counts full loads; a snapshot names its cluster and version."""

    def __init__(self, redis: Redis):
        self.redis, self.loads = redis, 0

    async def load(self, cluster: str, box: Any, ids: Any = None) -> Any:
        self.loads += 1
        version = (await self.redis.get(pki_keys(cluster)["version"])).decode()
        return SimpleNamespace(version=version, manifest=SimpleNamespace(cluster=cluster))


async def test_cache_serves_from_memory_until_the_version_moves_and_keeps_the_last_clusters(redis_url):
    r = Redis.from_url(redis_url)
    box = SecretBox(b"k" * 32)
    try:
        inner = CountingStore(r)
        cache = CachedPkiStore(r, inner, max_clusters=2)  # type: ignore[arg-type]
        for c in ("c1", "c2", "c3"):
            await r.set(pki_keys(c)["version"], "v1")
        await cache.load("c1", box)
        await cache.load("c1", box)
        assert inner.loads == 1  # the second load came from memory
        await r.set(pki_keys("c1")["version"], "v2")  # another replica changed the PKI
        assert (await cache.load("c1", box)).version == "v2" and inner.loads == 2
        await cache.load("c2", box)
        await cache.load("c1", box)  # c1 used last: c2 is the oldest
        await cache.load("c3", box)  # a third cluster evicts c2
        assert inner.loads == 4
        await cache.load("c1", box)
        assert inner.loads == 4  # c1 kept
        await cache.load("c2", box)
        assert inner.loads == 5  # c2 was evicted and loaded again
    finally:
        await r.aclose()
