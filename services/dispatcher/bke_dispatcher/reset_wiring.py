"""What a reset's snapshots need from the deployment: the object store and the snapshot key.

The same as the upgrader's (its app's `_Snapshots`); services do not import each other, and
this is wiring, not logic: ensure the store (an agent may only add objects, never create it)
and the deployment's X25519 snapshot key (SET NX) before the first snapshot is asked for.
"""
from __future__ import annotations

from typing import Any

from bke.secrets.snapshot_key import ensure_snapshot_key
from bke.secrets import box_from_env
from bke.state.keys import etcd_snapshot_key

__all__ = ["DispatcherSnapshotKey"]


class DispatcherSnapshotKey:
    def __init__(self, svc: Any, redis: Any):
        self.svc, self.redis = svc, redis
        self._recipient = ""

    async def recipient(self) -> str:
        if not self._recipient:
            key = await ensure_snapshot_key(self.redis, etcd_snapshot_key(), box_from_env())
            self._recipient = key.public_b64
        return self._recipient
