"""The stored plan: written once by the planner, read by every other service.

Signed by its writer (the planner; the upgrader when it replaces the plan) with the `plan`
record-signing key (bke.core.secrets.record_signing), and checked by every reader before use:
plan-meta holds `generation` (1 for a cluster's first plan, one more at each replacement) and
`signature`, over the plan's bytes bound to the cluster, its incarnation and that generation. A
`PlanCache` also refuses a plan of an older generation than one it has read (the same
incarnation): an older signed plan written back over a newer one.

Errors::

    PermanentError
     ├─ RecordSignatureError   the plan's signature is missing, another key's, does not match,
     │                         or it is older than one read before (bke.core.secrets.record_signing)
     └─ RecordKeyError         no plan-signing key stored, or a writer not given its key file
    TemporaryError             the plan is not stored yet
"""
from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence
from datetime import datetime, timezone

from redis.asyncio import Redis

from bke.core.errors import TemporaryError
from bke.core.plan import Plan
from bke.core.secrets.binding import new_incarnation
from bke.core.secrets.record_signing import RecordSignatureError
from .keys.planner import clusters_index, plan_replaceable_key, request_key
from .keys.plan import plan_key, plan_meta_key
from .keys.trust import record_signing_key
from .record_keys import RecordKeys, verifier_of
from bke.core.state.schema import SCHEMA_FIELD, check_readable, record_kind

__all__ = ["GENERATION_FIELD", "INCARNATION_FIELD", "INCARNATION_READ", "PLAN_SIGNED_KIND", "SIGNATURE_FIELD", "PlanCache",
           "PlanRecord", "RedisPlanStore", "incarnation_of", "plan_binding", "plan_digest"]


PLAN_VERSION = record_kind("plan").current  # written in plan-meta (bke.core.state.schema)


def plan_digest(plan_json: str) -> str:
    return hashlib.sha256(plan_json.encode()).hexdigest()


# plan-meta's field holding the cluster's incarnation (bke.core.secrets.binding): written once, with
# the first plan; a replacing plan (`_REPLACE`), an upgrade's or an apply's (`_UPGRADE`) keep it,
# and it goes with plan-meta when the cluster is deleted (bke.adapters.forgetting).
INCARNATION_FIELD = "incarnation"
INCARNATION_READ = ["digest", INCARNATION_FIELD]  # the plan-meta fields `incarnation_of` reads (HMGET)
GENERATION_FIELD, SIGNATURE_FIELD = "generation", "signature"  # plan-meta: what the signature binds, and it
PLAN_SIGNED_KIND = "plan"  # the record kind its signature names (bke.core.secrets.record_signing)


def plan_binding(incarnation: str, generation: int) -> tuple[str, str]:
    """What a plan's signature binds besides its cluster and bytes."""
    return incarnation, str(generation)


def _text(raw: object) -> str:
    return "" if raw is None else raw.decode() if isinstance(raw, bytes) else str(raw)


def _bytes(raw: object) -> bytes:
    return raw if isinstance(raw, bytes) else str(raw).encode()


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
           'incarnation', ARGV[7], 'generation', '1', 'signature', ARGV[8])
redis.call('SET', KEYS[3], ARGV[5])
redis.call('SADD', KEYS[4], ARGV[5])
return 1
"""

# Compare-and-swap on the stored digest, and only while the planner's mark names that same
# digest: two replicas replacing at once cannot both win, and the mark is spent by the swap. The
# generation signed (ARGV[9]) follows the one read before signing (ARGV[8], '' for none).
_REPLACE = """
if redis.call('HGET', KEYS[2], 'digest') ~= ARGV[6] then return 0 end
if redis.call('GET', KEYS[4]) ~= ARGV[6] then return 0 end
if (redis.call('HGET', KEYS[2], 'generation') or '') ~= ARGV[8] then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[2], 'digest', ARGV[2], 'requestId', ARGV[3], 'createdAt', ARGV[4], 'replaced', ARGV[6],
           'schemaVersion', ARGV[7], 'generation', ARGV[9], 'signature', ARGV[10])
redis.call('SET', KEYS[3], ARGV[5])
redis.call('DEL', KEYS[4])
return 1
"""

# An upgrade's plan replaces the installed one once every node runs it: compare-and-swap on the
# digest the upgrade started from (a second finisher, or a plan changed meanwhile, loses).
_UPGRADE = """
if redis.call('HGET', KEYS[2], 'digest') ~= ARGV[5] then return 0 end
if (redis.call('HGET', KEYS[2], 'generation') or '') ~= ARGV[6] then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[2], 'digest', ARGV[2], 'requestId', ARGV[3], 'createdAt', ARGV[4], 'upgradedFrom', ARGV[5],
           'generation', ARGV[7], 'signature', ARGV[8])
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


async def plan_exists(redis: Redis, cluster: str) -> bool:
    """Whether `cluster` has a stored plan: the read another service makes of the planner's
    record (a registration accepted, a deleted cluster planned again) goes through here."""
    return bool(await redis.exists(plan_key(cluster)))


async def planned_clusters(redis: Redis) -> list[str]:
    """The clusters the planner has planned (its index), sorted."""
    return sorted(_text(c) for c in await redis.smembers(clusters_index()))


class PlanRecord:
    def __init__(self, digest: str, request_id: str, created_at: str):
        self.digest, self.request_id, self.created_at = digest, request_id, created_at


class RedisPlanStore:
    """Plans in Redis: `bke:<cluster>:plan` (JSON), `bke:<cluster>:plan-meta` (hash) and the
    planner's `bke:<cluster>:plan-replaceable` mark (a digest)."""

    def __init__(self, redis: Redis, keys: RecordKeys | None = None):
        self.redis = redis
        self.keys = keys or RecordKeys(redis)  # a writer's holds its `plan` key (RecordKeys.boxes)

    async def _sign(self, cluster: str, plan_json: str, incarnation: str, generation: int) -> str:
        signer = await self.keys.signer("plan")
        return signer.sign(PLAN_SIGNED_KIND, cluster, plan_binding(incarnation, generation), plan_json.encode())

    async def _next(self, cluster: str) -> tuple[str, str, int]:
        """(incarnation, stored generation or "", the next generation) of a plan about to be
        replaced; the scripts check the generation again, so a race loses instead of misbinding."""
        inc, gen = await self.redis.hmget(plan_meta_key(cluster), [INCARNATION_FIELD, GENERATION_FIELD])
        stored = _text(gen)
        return _text(inc), stored, int(stored or 0) + 1

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
        signature = await self._sign(plan.cluster, plan_json, inc, 1)
        keys = [plan_key(plan.cluster), plan_meta_key(plan.cluster), request_key(request_id), clusters_index()]
        res = await self.redis.eval(_SAVE_ONCE, len(keys), *keys, plan_json, digest, request_id, now_iso, plan.cluster,
                                    PLAN_VERSION, inc, signature)
        return bool(res)

    async def incarnation(self, cluster: str) -> str | None:
        """The cluster's incarnation; None without a plan, "" for a plan stored before incarnations."""
        return incarnation_of(await self.redis.hmget(plan_meta_key(cluster), INCARNATION_READ))

    async def replace(self, plan: Plan, plan_json: str, digest: str, old_digest: str, request_id: str, now_iso: str) -> bool:
        """Replace the stored plan, atomically, if it still has `old_digest` and is marked
        replaceable for that digest: True if replaced now (the mark is then cleared)."""
        c = plan.cluster
        inc, stored, generation = await self._next(c)
        signature = await self._sign(c, plan_json, inc, generation)
        keys = [plan_key(c), plan_meta_key(c), request_key(request_id), plan_replaceable_key(c)]
        res = await self.redis.eval(_REPLACE, len(keys), *keys, plan_json, digest, request_id, now_iso, c, old_digest,
                                    PLAN_VERSION, stored, generation, signature)
        return bool(res)

    async def upgrade(self, plan: Plan, plan_json: str, digest: str, old_digest: str, request_id: str, now_iso: str) -> bool:
        """Store an upgrade's plan in place of the one it started from (`old_digest`): True if
        stored now, False if the stored plan is another one (already replaced, say)."""
        inc, stored, generation = await self._next(plan.cluster)
        signature = await self._sign(plan.cluster, plan_json, inc, generation)
        keys = [plan_key(plan.cluster), plan_meta_key(plan.cluster)]
        return bool(await self.redis.eval(_UPGRADE, len(keys), *keys, plan_json, digest, request_id, now_iso, old_digest,
                                          stored, generation, signature))

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
        return (await self.load_signed(cluster))[0]

    async def load_signed(self, cluster: str) -> tuple[Plan, str, int]:
        """The plan, checked against its signature (module docstring), with its incarnation and
        generation."""
        async with self.redis.pipeline(transaction=True) as pipe:  # the plan, its meta and key, consistent
            pipe.get(plan_key(cluster))
            pipe.hmget(plan_meta_key(cluster), [SCHEMA_FIELD, INCARNATION_FIELD, GENERATION_FIELD, SIGNATURE_FIELD])
            pipe.get(record_signing_key("plan"))
            raw, (version, inc, gen, signature), key = await pipe.execute()
        if raw is None:
            # The event can arrive before a replica's write is visible: retry, do not fail.
            raise TemporaryError(f"plan of cluster {cluster!r} not stored yet", delay=1.0)
        check_readable("plan", version, f"the plan of {cluster}")
        record = f"the plan of {cluster} ({plan_key(cluster)})"
        generation = int(_text(gen) or 0)
        verifier_of("plan", key, record).verify(record, PLAN_SIGNED_KIND, cluster,
                                                plan_binding(_text(inc), generation), _bytes(raw), _text(signature) or None)
        return Plan.model_validate_json(raw), _text(inc), generation


class PlanCache:
    """A parsed plan per cluster, re-read only when its stored digest changes: a 5,000-node
    plan is megabytes of JSON, and the dispatcher and certs read it on every event. Each plan
    read is checked (`RedisPlanStore.load_signed`), and one of an older generation than the last
    read of the same incarnation is refused: a replay of an older signed plan."""

    def __init__(self, redis: Redis):
        self.redis, self.store = redis, RedisPlanStore(redis)
        self._plans: dict[str, tuple[object, Plan]] = {}
        self._newest: dict[str, tuple[str, int]] = {}  # cluster -> (incarnation, generation) last read

    async def load(self, cluster: str) -> Plan:
        digest, version = await self.redis.hmget(plan_meta_key(cluster), ["digest", SCHEMA_FIELD])
        if digest is not None:  # a converted record keeps its digest: check the version every time
            check_readable("plan", version, f"the plan of {cluster}")
        cached = self._plans.get(cluster)
        if cached is not None and digest is not None and cached[0] == digest:
            return cached[1]
        plan, inc, generation = await self.store.load_signed(cluster)
        newest = self._newest.get(cluster)
        if newest is not None and newest[0] == inc and generation < newest[1]:
            raise RecordSignatureError(f"the plan of {cluster} ({plan_key(cluster)})",
                                       f"it is generation {generation}, older than generation {newest[1]} read "
                                       "before: an older plan written back")
        self._newest[cluster] = (inc, generation)
        if digest is not None:
            self._plans[cluster] = (digest, plan)
        return plan
