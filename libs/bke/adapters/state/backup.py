"""`bke state backup` / `bke state restore`: every BKE key in one encrypted file, and back.

What is saved is everything BKE needs to go on: every key under `bke:` (bke.adapters.state.keys names
them all), which holds the plans, the PKI (its private keys already encrypted at rest), the phase
state, the agents' registrations, and the identities and signing keys stored there. The epoch
(bke.adapters.state.epoch) is saved too. The JetStream streams are not saved: they are transient, and
whatever they still hold is handled again after the restore.

File format (version 1)::

    b"BKESTATE1\\n" | SecretBox blob (bke.core.secrets.at_rest, aad = the magic line)
      blob plaintext = gzip(JSON {"format": 1, "epoch", "createdAt", "digest", "keys": [...]})
      each key = {"key", "type": string|hash|set|list|zset, "pttl" (ms, -1 = none), "value"}
      with every byte string in base64; "digest" = sha256 of the canonical JSON of "keys"

Why typed reads rather than DUMP/RESTORE: DUMP's payload is tied to the server's RDB version,
so a file from one Redis would not restore into an older one (Redis `cluster.c`,
`verifyDumpPayload`). The values are read in one MULTI/EXEC, so the snapshot is consistent
across keys even while an install runs.

A restore refuses a file of another format or key, and a file that fails its digest. If `bke:`
keys exist it refuses unless `force` is set, and then it deletes them first. It never merges,
except the trust material, which an older backup must not roll back: revocations, the agent
keys provisioned since, the signing keys in use are kept from the store as it is now, unless
`replace_trust` is set (bke.adapters.state.restore_trust has the table of what and why). The current
trust keys are read, and the decision made, before anything is deleted. The epoch is written
last, so a service that watches it resumes only once all keys are back.

Errors (both permanent)::

    PermanentError
     ├─ BackupError      not a backup, another format, a digest mismatch, or keys in the way
     ├─ TrustError       (bke.adapters.state.restore_trust) the current NATS authority does not open
     └─ DecryptError     (bke.core.secrets.at_rest) another operator key, or a tampered file
"""
from __future__ import annotations

import base64
import gzip
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis

from bke.core.errors import PermanentError
from bke.core.secrets.at_rest import SecretBox
from .epoch import write_epoch
from .keys.common import all_keys_pattern, epoch_key
from .restore_trust import TrustDecision, decide_trust, trust_group

__all__ = ["FORMAT", "MAGIC", "BackupError", "BackupSummary", "backup_state", "decode_backup", "encode_backup",
           "existing_keys", "read_entries", "restore_state"]

MAGIC = b"BKESTATE1\n"
FORMAT = 1
SCAN_COUNT = 1000
WRITE_CHUNK = 500  # keys per pipeline when writing back


class BackupError(PermanentError):
    pass


@dataclass(frozen=True)
class BackupSummary:
    keys: int
    epoch: str | None
    digest: str
    created_at: str
    trust: list[TrustDecision] = field(default_factory=list)  # a restore's: where each trust item came from


def _b64(v: bytes | str) -> str:
    return base64.b64encode(v if isinstance(v, bytes) else v.encode()).decode()


def _unb64(v: str) -> bytes:
    return base64.b64decode(v.encode(), validate=True)


def _digest(entries: list[dict[str, Any]]) -> str:
    return hashlib.sha256(json.dumps(entries, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


async def existing_keys(redis: Redis) -> list[bytes]:
    """Every key under `bke:`, by SCAN (never KEYS: it blocks the server)."""
    return sorted([k async for k in redis.scan_iter(match=all_keys_pattern(), count=SCAN_COUNT)])


_READS = {
    b"string": lambda p, k: p.get(k),
    b"hash": lambda p, k: p.hgetall(k),
    b"set": lambda p, k: p.smembers(k),
    b"list": lambda p, k: p.lrange(k, 0, -1),
    b"zset": lambda p, k: p.zrange(k, 0, -1, withscores=True),
}


def _encode_value(kind: str, value: Any) -> Any:
    if kind == "string":
        return _b64(value)
    if kind == "hash":
        return {_b64(f): _b64(v) for f, v in sorted(value.items())}
    if kind == "set":
        return sorted(_b64(m) for m in value)
    if kind == "list":
        return [_b64(m) for m in value]
    return [[_b64(m), s] for m, s in value]  # zset


async def backup_state(redis: Redis, *, now: str) -> tuple[dict[str, Any], BackupSummary]:
    """Read every BKE key (one MULTI/EXEC) into the backup document (not yet encrypted)."""
    entries = await read_entries(redis, await existing_keys(redis))
    epoch = next((_unb64(e["value"]).decode() for e in entries if _unb64(e["key"]) == epoch_key().encode()), None)
    digest = _digest(entries)
    doc = {"format": FORMAT, "epoch": epoch, "createdAt": now, "digest": digest, "keys": entries}
    return doc, BackupSummary(len(entries), epoch, digest, now)


async def read_entries(redis: Redis, keys: list[bytes]) -> list[dict[str, Any]]:
    """These keys in the file's form, read in one MULTI/EXEC (a key gone meanwhile is left out)."""
    async with redis.pipeline(transaction=False) as pipe:
        for k in keys:
            pipe.type(k)
        types = [t if isinstance(t, bytes) else str(t).encode() for t in await pipe.execute()]
    wanted = [(k, t) for k, t in zip(keys, types) if t != b"none"]  # deleted since the SCAN
    unknown = sorted({t.decode() for _, t in wanted if t not in _READS})
    if unknown:
        raise BackupError(f"cannot back up keys of type {', '.join(unknown)} (BKE stores none)")
    async with redis.pipeline(transaction=True) as pipe:
        for k, t in wanted:
            pipe.type(k)
            _READS[t](pipe, k)
            pipe.pttl(k)
        replies = await pipe.execute()
    entries: list[dict[str, Any]] = []
    for i, (k, t) in enumerate(wanted):
        now_type, value, pttl = replies[3 * i:3 * i + 3]
        now_type = now_type if isinstance(now_type, bytes) else str(now_type).encode()
        if now_type != t:  # deleted or retyped between the two round trips: take it as gone
            continue
        kind = t.decode()
        entries.append({"key": _b64(k), "type": kind, "pttl": int(pttl), "value": _encode_value(kind, value)})
    return entries


def encode_backup(doc: dict[str, Any], box: SecretBox) -> bytes:
    plain = gzip.compress(json.dumps(doc, separators=(",", ":")).encode(), mtime=0)
    return MAGIC + box.encrypt(plain, aad=MAGIC)


def decode_backup(blob: bytes, box: SecretBox) -> dict[str, Any]:
    """Decrypt and check a backup file's bytes; DecryptError for another key or a tampered file."""
    if not blob.startswith(MAGIC):
        head = blob[:10]
        if head.startswith(b"BKESTATE"):
            raise BackupError(f"backup format {head[8:].strip().decode(errors='replace')!r} is not supported "
                              f"(this bke reads format {FORMAT})")
        raise BackupError("not a BKE state backup (bad header)")
    plain = box.decrypt(blob[len(MAGIC):], aad=MAGIC)
    try:
        doc = json.loads(gzip.decompress(plain))
    except (OSError, ValueError) as exc:
        raise BackupError(f"backup content unreadable: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise BackupError(f"backup format {doc.get('format') if isinstance(doc, dict) else '?'!r} is not supported "
                          f"(this bke reads format {FORMAT})")
    if _digest(doc.get("keys", [])) != doc.get("digest"):
        raise BackupError("backup digest mismatch: the file is corrupt")
    return doc


def _write(pipe: Any, key: bytes, kind: str, value: Any) -> None:
    if kind == "string":
        pipe.set(key, _unb64(value))
    elif kind == "hash":
        if value:
            pipe.hset(key, mapping={_unb64(f): _unb64(v) for f, v in value.items()})
    elif kind == "set":
        if value:
            pipe.sadd(key, *(_unb64(m) for m in value))
    elif kind == "list":
        if value:
            pipe.rpush(key, *(_unb64(m) for m in value))
    elif kind == "zset":
        if value:
            pipe.zadd(key, {_unb64(m): float(s) for m, s in value})
    else:
        raise BackupError(f"backup holds a key of unknown type {kind!r}")


async def restore_state(redis: Redis, doc: dict[str, Any], *, force: bool = False, box: SecretBox | None = None,
                        replace_trust: bool = False) -> BackupSummary:
    """Write a decoded backup into Redis; see the module docstring for the rules. `box` (the
    operator key) opens both NATS authorities to merge their revocations."""
    present = await existing_keys(redis)
    if present and not force:
        shown = ", ".join(k.decode(errors="replace") for k in present[:3])
        raise BackupError(f"{len(present)} BKE keys exist ({shown}{', ...' if len(present) > 3 else ''}): "
                          "pass --force to replace them with the backup")
    trusted = [] if replace_trust else [k for k in present if trust_group(k.decode(errors="replace")) is not None]
    plan = decide_trust(doc["keys"], await read_entries(redis, trusted), box, replace_trust=replace_trust)
    for i in range(0, len(present), WRITE_CHUNK):
        await redis.unlink(*present[i:i + WRITE_CHUNK])
    entries = [e for e in plan.entries if _unb64(e["key"]) != epoch_key().encode()]
    for i in range(0, len(entries), WRITE_CHUNK):
        async with redis.pipeline(transaction=True) as pipe:
            for e in entries[i:i + WRITE_CHUNK]:
                key = _unb64(e["key"])
                _write(pipe, key, e["type"], e["value"])
                if int(e["pttl"]) > 0:
                    pipe.pexpire(key, int(e["pttl"]))
            await pipe.execute()
    if doc.get("epoch"):
        await write_epoch(redis, doc["epoch"])  # last: services resume once everything is back
    return BackupSummary(len(doc["keys"]), doc.get("epoch"), doc["digest"], doc.get("createdAt", ""), plan.decisions)
