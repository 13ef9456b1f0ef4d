"""What the certs service's dashboard and /metrics show: each stored cluster's certificates and
their expiry, from its own store (the `bke:pki-clusters` index and each PKI).

Parsing every certificate of a 10,000-node cluster takes seconds of CPU, so the rows are kept
per (cluster, stored PKI version) and read again only after a save changed the version (one
GET per cluster per scrape otherwise); the parse runs in a worker thread. Days to expiry are
computed at each read from `now`, so the figures move with time and not only with saves.
"""
from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

from redis.asyncio import Redis

from bke.core.pki import PkiStore
from bke.core.pki.expiry import ExpiryRow, expiration_rows
from bke.adapters.pki.store_redis import pki_keys
from bke.adapters.state.keys.certs import pki_index

__all__ = ["BUCKETS", "ExpiryView", "bucket_of", "expiry_buckets"]

# (label, expires within): "expired" first, "later" for anything beyond the last bound
BUCKETS: tuple[tuple[str, timedelta], ...] = (
    ("expired", timedelta(0)),
    ("7d", timedelta(days=7)),
    ("30d", timedelta(days=30)),
    ("90d", timedelta(days=90)),
)
LATER = "later"


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else v


def bucket_of(residual: timedelta) -> str:
    """The first bucket whose bound the time left is within (at or past expiry: "expired")."""
    return next((label for label, bound in BUCKETS if residual <= bound), LATER)


def expiry_buckets(rows: list[ExpiryRow], now: datetime) -> dict[str, int]:
    """Certificates (CAs included) per bucket, every bucket present."""
    out = {label: 0 for label, _ in BUCKETS} | {LATER: 0}
    for r in rows:
        out[bucket_of(r.not_after - now)] += 1
    return out


class ExpiryView:
    def __init__(self, redis: Redis, store: PkiStore):
        self.redis, self.store = redis, store
        self._rows: dict[str, tuple[str, list[ExpiryRow]]] = {}  # cluster -> (version, rows)

    async def clusters(self) -> list[str]:
        return sorted(_s(c) for c in await self.redis.smembers(pki_index()))

    async def rows(self, cluster: str, now: datetime) -> list[ExpiryRow] | None:
        """The cluster's certificates with `residual` as of `now`; None if it has no PKI."""
        version = await self.redis.get(pki_keys(cluster)["version"])
        if version is None:
            self._rows.pop(cluster, None)
            return None
        cached = self._rows.get(cluster)
        if cached is None or cached[0] != _s(version):
            snap = await self.store.load(cluster, None)  # certificates only: no key is read
            if snap is None:
                return None
            rows = await asyncio.to_thread(expiration_rows, snap, now)
            self._rows[cluster] = cached = (snap.version or _s(version), rows)
        return [_at(r, now) for r in cached[1]]

    async def all_rows(self, now: datetime) -> dict[str, list[ExpiryRow]]:
        out = {}
        for cluster in await self.clusters():
            rows = await self.rows(cluster, now)
            if rows is not None:
                out[cluster] = rows
        for gone in set(self._rows) - set(out):
            self._rows.pop(gone, None)
        return out


def _at(r: ExpiryRow, now: datetime) -> ExpiryRow:
    return ExpiryRow(r.instance, r.name, r.owner, r.is_ca, r.not_after, r.not_after - now, r.ca, r.nodes)
