"""A read cache of the PKI for sealing bundles: thousands of agents register within seconds, and loading
the whole PKI once per registration would make sealing quadratic in the node count.

The cache is checked against a cheap version read on every use, so a new plan or a PKI
changed by another replica is picked up at once; private keys stay decrypted in this
process's memory only, as they are during issuance. It keeps the clusters used last, at most
MAX_CLUSTERS: a soak of consecutive installs showed the process growing by one snapshot (about
0.16 MB, decrypted keys included) per cluster ever sealed for.
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection

from redis.asyncio import Redis

from bke.core.pki.store import PkiStore, Snapshot
from bke.core.secrets import SecretBox

from bke.adapters.pki.store_redis import pki_keys

__all__ = ["CachedPkiStore", "MAX_CLUSTERS"]

MAX_CLUSTERS = 32  # registrations come in bursts per cluster; a cold cluster costs one full load


class CachedPkiStore:
    """A PkiStore whose loads serve from one full snapshot per (cluster, stored version)."""

    def __init__(self, redis: Redis, inner: PkiStore, max_clusters: int = MAX_CLUSTERS):
        self.redis, self.inner, self.max_clusters = redis, inner, max_clusters
        self._snaps: OrderedDict[str, Snapshot] = OrderedDict()  # least recently used first

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
            while len(self._snaps) > self.max_clusters:
                self._snaps.popitem(last=False)
        self._snaps.move_to_end(cluster)
        return snap

    async def save(self, snapshot: Snapshot, changed: Collection[str], box: SecretBox, expected_version: str | None) -> None:
        self._snaps.pop(snapshot.manifest.cluster, None)
        await self.inner.save(snapshot, changed, box, expected_version)
