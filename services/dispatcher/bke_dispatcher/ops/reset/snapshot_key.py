"""What a reset's snapshots need from the deployment: the recipient they are sealed to.

The dispatcher asks for snapshots but never opens one, so it holds no `snapshot` at-rest key
(bke.core.secrets.key_kinds): it reads the key's public half, which the stored record carries in clear
(bke.core.secrets.snapshot_key). The record is made by the admin side (`bke state init`, the lab's
start), never here: the dispatcher's Redis user only reads it.
"""
from __future__ import annotations

from redis.asyncio import Redis

from bke.core.secrets.snapshot_key import read_snapshot_recipient
from bke.adapters.state.keys.trust import etcd_snapshot_key

__all__ = ["DispatcherSnapshotKey"]


class DispatcherSnapshotKey:
    def __init__(self, redis: Redis):
        self.redis = redis
        self._recipient = ""

    async def recipient(self) -> str:
        if not self._recipient:
            self._recipient = await read_snapshot_recipient(self.redis, etcd_snapshot_key())
        return self._recipient
