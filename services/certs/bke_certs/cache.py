"""Read caches for sealing bundles: thousands of agents register within seconds, and loading
the whole plan and PKI once per registration would make sealing quadratic in the node count.

Both caches are checked against a cheap version read on every use, so a new plan or a PKI
changed by another replica is picked up at once; private keys stay decrypted in this
process's memory only, as they are during issuance.
"""
from __future__ import annotations

from collections.abc import Collection

from redis.asyncio import Redis

from bke.pki.store import PkiStore, Snapshot
from bke.plan import Plan
from bke.secrets import SecretBox
from bke.state import RedisPlanStore
from bke.state.keys import plan_meta_key

from bke.pki.store_redis import pki_keys

__all__ = ["CachedPkiStore", "CachedPlans"]


class CachedPlans:
    def __init__(self, redis: Redis):
        self.redis, self.store = redis, RedisPlanStore(redis)
        self._plans: dict[str, tuple[str, Plan]] = {}

    async def load(self, cluster: str) -> Plan:
        digest = await self.redis.hget(plan_meta_key(cluster), "digest")
        cached = self._plans.get(cluster)
        if cached and digest is not None and cached[0] == digest:
            return cached[1]
        plan = await self.store.load(cluster)
        if digest is not None:
            self._plans[cluster] = (digest, plan)
        return plan


class CachedPkiStore:
    """A PkiStore whose loads serve from one full snapshot per (cluster, stored version)."""

    def __init__(self, redis: Redis, inner: PkiStore):
        self.redis, self.inner = redis, inner
        self._snaps: dict[str, Snapshot] = {}

    async def load(self, cluster: str, box: SecretBox | None, ids: Collection[str] | None = None) -> Snapshot | None:
        if box is None:
            return await self.inner.load(cluster, box, ids)
        raw = await self.redis.get(pki_keys(cluster)["version"])
        version = raw.decode() if isinstance(raw, bytes) else raw
        snap = self._snaps.get(cluster)
        if snap is None or version is None or snap.version != version:
            snap = await self.inner.load(cluster, box, None)
            if snap is None:
                return None
            self._snaps[cluster] = snap
        return snap

    async def save(self, snapshot: Snapshot, changed: Collection[str], box: SecretBox, expected_version: str | None) -> None:
        self._snaps.pop(snapshot.manifest.cluster, None)
        await self.inner.save(snapshot, changed, box, expected_version)
