"""The stored plan: written once by the planner, read by every other service."""
from __future__ import annotations

import hashlib

from redis.asyncio import Redis

from ..errors import TemporaryError
from ..plan import Plan
from .keys import clusters_index, plan_key, plan_meta_key, request_key

__all__ = ["PlanCache", "PlanRecord", "RedisPlanStore", "plan_digest"]


def plan_digest(plan_json: str) -> str:
    return hashlib.sha256(plan_json.encode()).hexdigest()


# One script so that a crash can never leave metadata without its plan.
_SAVE_ONCE = """
if redis.call('HEXISTS', KEYS[2], 'digest') == 1 then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[2], 'digest', ARGV[2], 'requestId', ARGV[3], 'createdAt', ARGV[4])
redis.call('SET', KEYS[3], ARGV[5])
redis.call('SADD', KEYS[4], ARGV[5])
return 1
"""


class PlanRecord:
    def __init__(self, digest: str, request_id: str, created_at: str):
        self.digest, self.request_id, self.created_at = digest, request_id, created_at


class RedisPlanStore:
    """Plans in Redis: `bke:<cluster>:plan` (JSON) and `bke:<cluster>:plan-meta` (hash)."""

    def __init__(self, redis: Redis):
        self.redis = redis

    async def meta(self, cluster: str) -> PlanRecord | None:
        raw = await self.redis.hgetall(plan_meta_key(cluster))
        if not raw:
            return None
        d = {k.decode() if isinstance(k, bytes) else k: v.decode() if isinstance(v, bytes) else v for k, v in raw.items()}
        return PlanRecord(d["digest"], d["requestId"], d["createdAt"])

    async def save(self, plan: Plan, plan_json: str, digest: str, request_id: str, now_iso: str) -> bool:
        """Store once, atomically: True if stored now, False if the cluster already had a plan."""
        keys = [plan_key(plan.cluster), plan_meta_key(plan.cluster), request_key(request_id), clusters_index()]
        res = await self.redis.eval(_SAVE_ONCE, len(keys), *keys, plan_json, digest, request_id, now_iso, plan.cluster)
        return bool(res)

    async def remember_request(self, request_id: str, cluster: str) -> None:
        await self.redis.set(request_key(request_id), cluster)

    async def load(self, cluster: str) -> Plan:
        raw = await self.redis.get(plan_key(cluster))
        if raw is None:
            # The event can arrive before a replica's write is visible: retry, do not fail.
            raise TemporaryError(f"plan of cluster {cluster!r} not stored yet", delay=1.0)
        return Plan.model_validate_json(raw)


class PlanCache:
    """A parsed plan per cluster, re-read only when its stored digest changes: a 5,000-node
    plan is megabytes of JSON, and the dispatcher and certs read it on every event."""

    def __init__(self, redis: Redis):
        self.redis, self.store = redis, RedisPlanStore(redis)
        self._plans: dict[str, tuple[object, Plan]] = {}

    async def load(self, cluster: str) -> Plan:
        digest = await self.redis.hget(plan_meta_key(cluster), "digest")
        cached = self._plans.get(cluster)
        if cached is not None and digest is not None and cached[0] == digest:
            return cached[1]
        plan = await self.store.load(cluster)
        if digest is not None:
            self._plans[cluster] = (digest, plan)
        return plan
