"""One operation per cluster: the cluster's operation slot, claimed in one atomic step.

Why: "a second request waits or is refused with a reason" used to be a read of each other
operation's record followed by a write of one's own, scattered over the services. Two requests
at the same instant (an upgrade and a restore, say) could both read "nothing runs" and both
start. Now every operation (install, upgrade, etcd restore, certificate rotation, reset,
delete, apply) claims the same key with one Lua script: the claim succeeds only if the slot is
free or already held by the same operation (kind and request id), and a refusal names the
holder. Redis runs a script as one step, so of N concurrent claims exactly one wins, whichever
replica of whichever service sends it.

    bke:<c>:operation   hash  kind, requestId, since, detail, schemaVersion

Lifetime: claimed when the operation is accepted (before its own record is written), released
when it ends (Succeeded, Failed, or refused after the claim). No TTL: an upgrade may take
hours, and an operation whose process dies keeps the slot until a replica resumes it (it finds
its claim again: the claim is idempotent for the same kind and request id) and ends it. A pass
that finds its operation already finished releases again (`release` is idempotent, and only
the holder's own kind and request id release it), so a crash between "record says finished" and
"slot released" heals at the next resume. An install holds the slot while it runs and releases
it when it ends: a finished install is the normal state of a cluster, not an operation.

Pure part: `Holder`, `refusal`, `holder_of`. Redis part: `claim_operation`, `release_operation`,
`operation_holder` (one round trip each). Errors: an outage is the caller's TemporaryError (the
redis client's ConnectionError); a slot written by a newer BKE raises StoredVersionTooNew.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Literal, get_args

from redis.asyncio import Redis

from .keys.shared import operation_key
from bke.core.state.schema import SCHEMA_FIELD, check_readable, record_kind

__all__ = ["FIELDS", "KINDS", "Claim", "Holder", "OperationKind", "claim_operation", "holder_of", "operation_holder",
           "refusal", "release_operation", "start_in_slot"]

# The kinds of operation that hold the slot. "apply" is the upcoming `bke apply` (a change to a
# running cluster); a new kind only needs its name here.
OperationKind = Literal["install", "upgrade", "etcd-restore", "rotation", "reset", "delete", "apply", "join", "removal"]
KINDS: tuple[str, ...] = get_args(OperationKind)
SLOT_VERSION = record_kind("operation").current
# How each kind reads in a sentence ("etcd restore r1 of c1 is running").
_WORDS = {"etcd-restore": "etcd restore", "rotation": "certificate rotation", "removal": "node removal"}


@dataclass(frozen=True)
class Holder:
    """Who holds a cluster's slot: the operation's kind, its request id, since when, and what
    of the cluster it works on when that is not the whole cluster (a restore's etcd cluster)."""

    kind: str
    request_id: str
    since: str
    detail: str = ""

    def describe(self, cluster: str) -> str:
        where = f"{self.detail} in {cluster}" if self.detail else cluster
        return f"{_WORDS.get(self.kind, self.kind)} {self.request_id} of {where}"


@dataclass(frozen=True)
class Claim:
    """The answer to a claim: `won`, and the holder (this operation when it won)."""

    won: bool
    holder: Holder

    def refusal(self, cluster: str) -> str:
        """"" when won, else why not, naming the holder."""
        return "" if self.won else refusal(cluster, self.holder)


def refusal(cluster: str, holder: Holder) -> str:
    """The user-facing reason a second operation may not start (the project's wording)."""
    return f"{holder.describe(cluster)} is running: one operation per cluster"


# KEYS[1] the slot; ARGV: kind, request id, since, version, version field name, detail. Returns
# {won, kind, request id, since, version, detail} of the holder after the call. Claimed only if
# free or held by this very operation.
_CLAIM = """
local cur = redis.call('HMGET', KEYS[1], 'kind', 'requestId', 'since', ARGV[5], 'detail')
if cur[1] and not (cur[1] == ARGV[1] and cur[2] == ARGV[2]) then
  return {0, cur[1], cur[2] or '', cur[3] or '', cur[4] or '', cur[5] or ''}
end
if not cur[1] then
  redis.call('HSET', KEYS[1], 'kind', ARGV[1], 'requestId', ARGV[2], 'since', ARGV[3], ARGV[5], ARGV[4], 'detail', ARGV[6])
  return {1, ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[6]}
end
return {1, cur[1], cur[2], cur[3] or '', cur[4] or '', cur[5] or ''}
"""
# KEYS[1] the slot; ARGV: kind, request id. Deleted only by its holder: 1 if released.
_RELEASE = """
local cur = redis.call('HMGET', KEYS[1], 'kind', 'requestId')
if cur[1] == ARGV[1] and cur[2] == ARGV[2] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else ("" if v is None else str(v))


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"kind: {kind!r} is not an operation kind ({', '.join(KINDS)})")


async def claim_operation(redis: Redis, cluster: str, kind: str, request_id: str, now: str, detail: str = "") -> Claim:
    """Take the cluster's slot for (kind, request id), or find it held: by this operation (won,
    a redelivery or a resume) or by another (not won; `Claim.refusal` names it). `now`: when
    (ISO time, injected); `detail`: what of the cluster it works on, for the refusal's words.
    The one line another operation (`bke apply`) needs: `claim_operation(r, c, "apply", rid, now)`
    and, at its end, `release_operation(r, c, "apply", rid)`."""
    _check_kind(kind)
    if not request_id:
        raise ValueError("requestId: an operation needs a request id to hold the slot")
    won, k, rid, since, version, what = (_s(v) for v in await redis.eval(
        _CLAIM, 1, operation_key(cluster), kind, request_id, now, str(SLOT_VERSION), SCHEMA_FIELD, detail))
    check_readable("operation", version or None, f"the operation slot of {cluster}")
    return Claim(won == "1", Holder(k, rid, since, what))


async def release_operation(redis: Redis, cluster: str, kind: str, request_id: str) -> bool:
    """Free the slot if (kind, request id) holds it; False if it did not (already released, or
    another operation's): safe to call from every end and every resume."""
    return bool(await redis.eval(_RELEASE, 1, operation_key(cluster), kind, request_id))


# The slot's fields in the order `holder_of` reads them (HMGET, also inside a caller's pipeline).
FIELDS = ("kind", "requestId", "since", SCHEMA_FIELD, "detail")


def holder_of(cluster: str, values: list[Any]) -> Holder | None:
    """The holder from the slot's FIELDS as HMGET returned them (None: the slot is free)."""
    kind, rid, since, version, detail = values
    if version is not None:  # a newer form is refused before anything of it is read
        check_readable("operation", version, f"the operation slot of {cluster}")
    if kind is None:
        return None
    return Holder(_s(kind), _s(rid), _s(since), _s(detail))


async def operation_holder(redis: Redis, cluster: str) -> Holder | None:
    """The operation holding the cluster's slot, or None (for `bke status`, and for a dry run
    that answers what a real request would be told)."""
    return holder_of(cluster, await redis.hmget(operation_key(cluster), list(FIELDS)))


async def start_in_slot(redis: Redis, cluster: str, kind: str, request_id: str, since: str,
                        start: Callable[[], Awaitable[str]]) -> str:
    """Claim the slot, then `start` the operation's own record (its refusal, "" when started):
    the refusal of either; a record that refuses after the claim gives the slot back. Every
    operation starts this way, so that the claim is the one atomic step between kinds while the
    record's own check still covers one left running without a claim (written before the slot)."""
    why = (await claim_operation(redis, cluster, kind, request_id, since)).refusal(cluster)
    if why:
        return why
    why = await start()
    if why:
        await release_operation(redis, cluster, kind, request_id)
    return why
