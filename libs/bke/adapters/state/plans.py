"""The stored plan: written once by the planner, read by every other service."""
from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence
from datetime import datetime, timezone

from redis.asyncio import Redis

from bke.core.errors import TemporaryError
from bke.core.plan import Plan
from bke.core.secrets.binding import new_incarnation
from .keys import clusters_index, plan_key, plan_meta_key, plan_replaceable_key, request_key
from bke.core.state.schema import SCHEMA_FIELD, check_readable, record_kind

__all__ = ["INCARNATION_FIELD", "INCARNATION_READ", "PlanCache", "PlanRecord", "RedisPlanStore", "incarnation_of",
           "plan_digest"]


PLAN_VERSION = record_kind("plan").current  # written in plan-meta (bke.core.state.schema)


def plan_digest(plan_json: str) -> str:
    return hashlib.sha256(plan_json.encode()).hexdigest()


# plan-meta's field holding the cluster's incarnation (bke.core.secrets.binding): written once, with
# the first plan; a replacing plan (`_REPLACE`), an upgrade's or an apply's (`_UPGRADE`) keep it,
# and it goes with plan-meta when the cluster is deleted (bke.adapters.forgetting).
INCARNATION_FIELD = "incarnation"
INCARNATION_READ = ["digest", INCARNATION_FIELD]  # the plan-meta fields `incarnation_of` reads (HMGET)


def incarnation_of(meta: Sequence[object]) -> str | None:
    """The cluster's incarnation from plan-meta's INCARNATION_READ values: None without a plan,
    "" for a plan stored before incarnations."""
    if meta[0] is None:
        return None
    raw = meta[1]
    return "" if raw is None else raw.decode() if isinstance(raw, bytes) else str(raw)


# One script so that a crash can never leave metadata without its plan.
_SAVE_ONCE = """
if redis.call('HEXISTS', KEYS[2], 'digest') == 1 then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[2], 'digest', ARGV[2], 'requestId', ARGV[3], 'createdAt', ARGV[4], 'schemaVersion', ARGV[6],
           'incarnation', ARGV[7])
redis.call('SET', KEYS[3], ARGV[5])
redis.call('SADD', KEYS[4], ARGV[5])
return 1
"""

# Compare-and-swap on the stored digest, and only while the planner's mark names that same
# digest: two replicas replacing at once cannot both win, and the mark is spent by the swap.
_REPLACE = """
if redis.call('HGET', KEYS[2], 'digest') ~= ARGV[6] then return 0 end
if redis.call('GET', KEYS[4]) ~= ARGV[6] then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[2], 'digest', ARGV[2], 'requestId', ARGV[3], 'createdAt', ARGV[4], 'replaced', ARGV[6],
           'schemaVersion', ARGV[7])
redis.call('SET', KEYS[3], ARGV[5])
redis.call('DEL', KEYS[4])
return 1
"""

# An upgrade's plan replaces the installed one once every node runs it: compare-and-swap on the
# digest the upgrade started from (a second finisher, or a plan changed meanwhile, loses).
_UPGRADE = """
if redis.call('HGET', KEYS[2], 'digest') ~= ARGV[5] then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[2], 'digest', ARGV[2], 'requestId', ARGV[3], 'createdAt', ARGV[4], 'upgradedFrom', ARGV[5])
return 1
"""

# The mark names the digest stored when the install failed, so a later plan is never covered by it.
_MARK = """
local digest = redis.call('HGET', KEYS[1], 'digest')
if not digest then return 0 end
if ARGV[1] ~= '' and ARGV[1] ~= digest then return 0 end
redis.call('SET', KEYS[2], digest)
return 1
"""


def _instant(iso: str) -> datetime:
    """`iso` as a UTC instant (a naive one is UTC; one that does not parse: now)."""
    try:
        at = datetime.fromisoformat(iso)
    except ValueError:
        return datetime.now(timezone.utc)
    return at if at.tzinfo is not None else at.replace(tzinfo=timezone.utc)


class PlanRecord:
    def __init__(self, digest: str, request_id: str, created_at: str):
        self.digest, self.request_id, self.created_at = digest, request_id, created_at


class RedisPlanStore:
    """Plans in Redis: `bke:<cluster>:plan` (JSON), `bke:<cluster>:plan-meta` (hash) and the
    planner's `bke:<cluster>:plan-replaceable` mark (a digest)."""

    def __init__(self, redis: Redis):
        self.redis = redis

    async def meta(self, cluster: str) -> PlanRecord | None:
        raw = await self.redis.hgetall(plan_meta_key(cluster))
        if not raw:
            return None
        d = {k.decode() if isinstance(k, bytes) else k: v.decode() if isinstance(v, bytes) else v for k, v in raw.items()}
        return PlanRecord(d["digest"], d["requestId"], d["createdAt"])

    async def save(self, plan: Plan, plan_json: str, digest: str, request_id: str, now_iso: str,
                   incarnation: str | None = None) -> bool:
        """Store once, atomically: True if stored now, False if the cluster already had a plan.
        The first plan of a cluster makes its incarnation (`incarnation`, else a new one made at
        `now_iso`; bke.core.secrets.binding)."""
        inc = incarnation or new_incarnation(_instant(now_iso), secrets.token_hex(8))
        keys = [plan_key(plan.cluster), plan_meta_key(plan.cluster), request_key(request_id), clusters_index()]
        res = await self.redis.eval(_SAVE_ONCE, len(keys), *keys, plan_json, digest, request_id, now_iso, plan.cluster,
                                    PLAN_VERSION, inc)
        return bool(res)

    async def incarnation(self, cluster: str) -> str | None:
        """The cluster's incarnation; None without a plan, "" for a plan stored before incarnations."""
        return incarnation_of(await self.redis.hmget(plan_meta_key(cluster), INCARNATION_READ))

    async def replace(self, plan: Plan, plan_json: str, digest: str, old_digest: str, request_id: str, now_iso: str) -> bool:
        """Replace the stored plan, atomically, if it still has `old_digest` and is marked
        replaceable for that digest: True if replaced now (the mark is then cleared)."""
        c = plan.cluster
        keys = [plan_key(c), plan_meta_key(c), request_key(request_id), plan_replaceable_key(c)]
        res = await self.redis.eval(_REPLACE, len(keys), *keys, plan_json, digest, request_id, now_iso, c, old_digest,
                                    PLAN_VERSION)
        return bool(res)

    async def upgrade(self, plan: Plan, plan_json: str, digest: str, old_digest: str, request_id: str, now_iso: str) -> bool:
        """Store an upgrade's plan in place of the one it started from (`old_digest`): True if
        stored now, False if the stored plan is another one (already replaced, say)."""
        keys = [plan_key(plan.cluster), plan_meta_key(plan.cluster)]
        return bool(await self.redis.eval(_UPGRADE, len(keys), *keys, plan_json, digest, request_id, now_iso, old_digest))

    async def replaceable(self, cluster: str) -> str | None:
        """The digest marked replaceable for `cluster`, if any."""
        raw = await self.redis.get(plan_replaceable_key(cluster))
        return raw.decode() if isinstance(raw, bytes) else raw

    async def mark_replaceable(self, cluster: str, digest: str = "") -> bool:
        """Mark the stored plan replaceable; False if the cluster has no plan, or its plan is not
        the one with this digest (an outcome about an older plan)."""
        keys = [plan_meta_key(cluster), plan_replaceable_key(cluster)]
        return bool(await self.redis.eval(_MARK, len(keys), *keys, digest))

    async def clear_replaceable(self, cluster: str) -> None:
        await self.redis.delete(plan_replaceable_key(cluster))

    async def remember_request(self, request_id: str, cluster: str) -> None:
        await self.redis.set(request_key(request_id), cluster)

    async def load(self, cluster: str) -> Plan:
        async with self.redis.pipeline(transaction=True) as pipe:  # the plan and its version, consistent
            pipe.get(plan_key(cluster))
            pipe.hget(plan_meta_key(cluster), SCHEMA_FIELD)
            raw, version = await pipe.execute()
        if raw is None:
            # The event can arrive before a replica's write is visible: retry, do not fail.
            raise TemporaryError(f"plan of cluster {cluster!r} not stored yet", delay=1.0)
        check_readable("plan", version, f"the plan of {cluster}")
        return Plan.model_validate_json(raw)


class PlanCache:
    """A parsed plan per cluster, re-read only when its stored digest changes: a 5,000-node
    plan is megabytes of JSON, and the dispatcher and certs read it on every event."""

    def __init__(self, redis: Redis):
        self.redis, self.store = redis, RedisPlanStore(redis)
        self._plans: dict[str, tuple[object, Plan]] = {}

    async def load(self, cluster: str) -> Plan:
        digest, version = await self.redis.hmget(plan_meta_key(cluster), ["digest", SCHEMA_FIELD])
        if digest is not None:  # a converted record keeps its digest: check the version every time
            check_readable("plan", version, f"the plan of {cluster}")
        cached = self._plans.get(cluster)
        if cached is not None and digest is not None and cached[0] == digest:
            return cached[1]
        plan = await self.store.load(cluster)
        if digest is not None:
            self._plans[cluster] = (digest, plan)
        return plan
