"""`ensure_current`: convert every record of a cluster to the form this BKE writes.

Run by `bke state migrate`, as the admin user: a conversion writes every service's records, and
each service's Redis user may write only its own (bke.adapters.runtime.redis_acl). Services never
convert; the upgrader's pre-checks step only reads the headers of the records it relies on
(`needs_conversion`) and refuses the upgrade, naming the command, while one is older. Per record
(bke.core.state.schema), one optimistic transaction: WATCH the header, read it; if the record is
older, WATCH and read the members its converters need, compute the new form (the pure core,
bke.adapters.state.conversion), and write only what changed in one MULTI/EXEC. If anything watched
changed meanwhile (a service wrote, or a second `ensure_current` converted first), the EXEC
fails and the record is read again: the second process then finds it current. Safe to re-run:
a current record is left alone, byte for byte.

A record newer than this code is refused (StoredVersionTooNew): a conversion never goes back.

Run it with the services of the new version (or none) running: a service of the old version
would go on writing the old form after the conversion.

Errors::

    PermanentError
     ├─ StoredVersionTooNew   (bke.core.state.schema) a record of a newer BKE
     └─ ConversionError       (bke.adapters.state.conversion) no converter from a stored version
    TemporaryError
     └─ MigrationBusy         the record kept changing under the conversion (tries exhausted)
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import WatchError

from bke.core.errors import TemporaryError
from .conversion import CONVERTERS, Record, Registry, Write, chain, convert, header_version, writes
from .keys.common import PREFIX, cluster_key
from .keys.planner import clusters_index
from .keys.dispatcher import installs_index, rotations_index
from bke.core.state.schema import RECORDS, RecordKind, StoredVersionTooNew

__all__ = ["KindResult", "MigrationBusy", "MigrationReport", "ensure_current", "known_clusters", "needs_conversion"]

TRIES = 10
SCAN_COUNT = 1000


class MigrationBusy(TemporaryError):
    pass


@dataclass(frozen=True)
class KindResult:
    kind: str
    found: int | None  # the stored version; None: nothing stored
    header: bool  # whether the record has its header (else its members were converted in place)
    steps: tuple[str, ...] = ()  # the converters applied (their summaries)
    writes: int = 0  # Redis commands written

    @property
    def converted(self) -> bool:
        return bool(self.steps)


@dataclass(frozen=True)
class MigrationReport:
    cluster: str
    results: tuple[KindResult, ...]
    dry_run: bool = False

    @property
    def converted(self) -> tuple[KindResult, ...]:
        return tuple(r for r in self.results if r.converted)


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


async def _members(redis: Redis, cluster: str, patterns: Sequence[str]) -> list[str]:
    """The member names that exist now (patterns resolved by SCAN, never KEYS)."""
    base = cluster_key(cluster, "")
    names: set[str] = set()
    for p in patterns:
        if "*" in p:
            names.update([_s(k)[len(base):] async for k in redis.scan_iter(match=base + p, count=SCAN_COUNT)])
        elif await redis.exists(base + p):
            names.add(p)
    return sorted(names)


async def _read(redis: Redis, cluster: str, names: Sequence[str]) -> Record:
    """The members' values, in one round trip (a key deleted meanwhile is left out)."""
    if not names:
        return {}
    full = [cluster_key(cluster, n) for n in names]
    async with redis.pipeline(transaction=False) as pipe:
        for k in full:
            pipe.type(k)
        types = [_s(t) for t in await pipe.execute()]
    async with redis.pipeline(transaction=False) as pipe:
        for k, t in zip(full, types):
            {"string": pipe.get, "hash": pipe.hgetall, "set": pipe.smembers}.get(t, pipe.exists)(k)
        values = await pipe.execute()
    out: Record = {}
    for n, t, v in zip(names, types, values):
        if t == "string" and v is not None:
            out[n] = _s(v)
        elif t == "hash" and v:
            out[n] = {_s(f): _s(x) for f, x in v.items()}
        elif t == "set" and v:
            out[n] = frozenset(_s(m) for m in v)
    return out


def _queue(pipe: Any, cluster: str, w: Write) -> None:
    key = cluster_key(cluster, w.member)
    if w.op == "set":
        pipe.set(key, w.args[0], keepttl=True)  # a renewal answer keeps its expiry
    elif w.op == "del":
        pipe.delete(key)
    elif w.op == "hset":
        pipe.hset(key, mapping=w.args[0])
    else:
        getattr(pipe, w.op)(key, *w.args)


async def _ensure_kind(redis: Redis, cluster: str, kind: RecordKind, registry: Registry, dry_run: bool) -> KindResult:
    header_key = cluster_key(cluster, kind.slot.key)
    for _ in range(TRIES):
        async with redis.pipeline(transaction=True) as pipe:
            await pipe.watch(header_key)
            head = await _read(redis, cluster, [kind.slot.key])
            version = header_version(kind, head)
            has_header = version is not None
            if version is None:  # no header: members written before it (or nothing stored)
                if not await _members(redis, cluster, kind.members):
                    return KindResult(kind.name, None, False)
                version = kind.first
            if version > kind.current:
                raise StoredVersionTooNew(kind.name, version, f"{cluster}'s {kind.name} record",
                                          f"{cluster}'s {kind.name} record is version {version}, newer than this BKE "
                                          f"knows ({kind.current}): it was converted by a newer BKE")
            if version == kind.current:
                return KindResult(kind.name, version, has_header)
            needed = sorted({p for c in chain(kind, version, registry) for p in c.reads})  # ConversionError first
            names = await _members(redis, cluster, needed)
            names = [n for n in names if n != kind.slot.key]
            if names:
                await pipe.watch(header_key, *(cluster_key(cluster, n) for n in names))
            old = {**head, **await _read(redis, cluster, names)}
            new, steps = convert(kind, old, version, registry)
            todo = writes(old, new)
            result = KindResult(kind.name, version, has_header, tuple(c.summary for c in steps), len(todo))
            if dry_run or not todo:
                return result
            pipe.multi()
            for w in todo:
                _queue(pipe, cluster, w)
            try:
                await pipe.execute()
            except WatchError:
                continue  # changed under us: read it again (another process may have converted it)
            return result
    raise MigrationBusy(f"{cluster}'s {kind.name} record kept changing during its conversion; try again", delay=1.0)


async def ensure_current(redis: Redis, cluster: str, *, registry: Registry = CONVERTERS,
                         kinds: Sequence[RecordKind] = RECORDS, dry_run: bool = False) -> MigrationReport:
    """Convert every record of `cluster` to the current versions (see the module docstring);
    `dry_run` reads and reports what would be converted, writing nothing."""
    results = [await _ensure_kind(redis, cluster, k, registry, dry_run) for k in kinds]
    return MigrationReport(cluster, tuple(results), dry_run)


async def needs_conversion(redis: Redis, cluster: str, kinds: Sequence[RecordKind]) -> list[KindResult]:
    """The records of `kinds` whose header holds an older version, read from the headers alone
    (one read each; no WATCH, no write, no member): what a service that may not convert checks
    before it relies on them. A record without a header is not looked at (its members may be
    keys the caller may not read); one newer than this code raises StoredVersionTooNew."""
    out = []
    for kind in kinds:
        version = header_version(kind, await _read(redis, cluster, [kind.slot.key]))
        if version is not None and version > kind.current:
            raise StoredVersionTooNew(kind.name, version, f"{cluster}'s {kind.name} record",
                                      f"{cluster}'s {kind.name} record is version {version}, newer than this BKE "
                                      f"knows ({kind.current}): it was converted by a newer BKE")
        if version is not None and version < kind.current:
            out.append(KindResult(kind.name, version, True))
    return out


async def known_clusters(redis: Redis) -> list[str]:
    """Every cluster with a record: the indexes, and any key that is a record's header."""
    names = {_s(c) for idx in (clusters_index(), installs_index(), rotations_index()) for c in await redis.smembers(idx)}
    headers = {k.slot.key for k in RECORDS}
    async for raw in redis.scan_iter(match=f"{PREFIX}:*", count=SCAN_COUNT):
        _, _, rest = _s(raw).partition(":")
        cluster, _, member = rest.partition(":")
        if member in headers:
            names.add(cluster)
    return sorted(names)
