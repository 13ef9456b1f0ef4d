"""The certs service's view of each cluster's operations, in its own Redis hash, kept from
the dispatcher's events (never read from the dispatcher's storage).

    bke:<c>:certs:ops          hash  install, rotation, rotationId, pending, schemaVersion (bke.core.state.schema)
    bke:<c>:certs:renewal:<id> string the CertsRenewed a request produced (answers a redelivery)
"""
from __future__ import annotations

from typing import Any

from redis.asyncio import Redis

from bke.adapters.state.keys.certs import certs_ops_key, certs_renewal_key
from bke.contracts.statuses import OperationStatus
from bke.core.state.schema import SCHEMA_FIELD, check_readable, record_kind

from .renewal import OpsView

__all__ = ["OpsStore", "RENEWAL_TTL_S"]

RENEWAL_TTL_S = 7 * 86400  # as long as the streams keep a request
# Every write of the ops hash names its form (same HSET): the certs service's records'
# version (bke.core.state.schema). No extra round trip.
_VERSION = {SCHEMA_FIELD: str(record_kind("certs").current)}


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else v


class OpsStore:
    def __init__(self, redis: Redis):
        self.r = redis

    @staticmethod
    def _key(cluster: str) -> str:
        return certs_ops_key(cluster)

    async def view(self, cluster: str) -> OpsView:
        raw = {_s(k): _s(v) for k, v in (await self.r.hgetall(self._key(cluster))).items()}
        if raw:
            check_readable("certs", raw.get(SCHEMA_FIELD), f"the certs service's records of {cluster}")
        return OpsView(install=raw.get("install"), rotation=raw.get("rotation"),
                       rotation_id=raw.get("rotationId"), pending=raw.get("pending") or None)

    async def set_install(self, cluster: str, status: str) -> None:
        await self.r.hset(self._key(cluster), mapping={"install": status, **_VERSION})

    async def set_pending(self, cluster: str, request_id: str) -> None:
        await self.r.hset(self._key(cluster), mapping={"pending": request_id, **_VERSION})

    async def set_rotation(self, cluster: str, request_id: str, status: str) -> None:
        """Record a rotation's status; a finished one releases the renewal waiting for it. A
        rotation the dispatcher refused while another ran does not hide the running one."""
        key = self._key(cluster)
        cur = await self.view(cluster)
        if status == OperationStatus.RUNNING or cur.rotation != OperationStatus.RUNNING or cur.rotation_id == request_id:
            await self.r.hset(key, mapping={"rotation": status, "rotationId": request_id, **_VERSION})
        if status != OperationStatus.RUNNING and cur.pending == request_id:
            await self.r.hdel(key, "pending")

    async def renewal(self, cluster: str, request_id: str) -> bytes | None:
        raw = await self.r.get(certs_renewal_key(cluster, request_id))
        return None if raw is None else (raw.encode() if isinstance(raw, str) else raw)

    async def save_renewal(self, cluster: str, request_id: str, event: bytes) -> None:
        await self.r.set(certs_renewal_key(cluster, request_id), event, ex=RENEWAL_TTL_S)
