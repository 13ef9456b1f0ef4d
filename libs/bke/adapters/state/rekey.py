"""Every record encrypted at rest, by key kind, and their re-encryption under a kind's current key.

What `bke keys rotate` and `bke keys retire` walk (bke.core.secrets.key_kinds says who holds each
kind). One row per family of Redis keys; a family is found by its name or a SCAN pattern
(bke.adapters.state.keys names them)::

    kind       key                           form    value
    pki        bke:<c>:pki:keys              hash    instance id -> base64(blob), aad "<c>/<id>"
    api        bke:<c>:api-credentials       hash    admin, super-admin -> blob
    signing    bke:command-signing-key       string  blob
               bke:command-signing-key:next  string  blob (during a rollover)
    snapshot   bke:etcd-snapshot-key         string  [b"BKESNAP1" | public half] blob
    authority  bke:auth:authority            string  blob, aad the key's name
    plan       bke:plan-signing-key          string  "BKEREC1:<public half>:<base64 blob>"
    render     bke:render-signing-key        string  "BKEREC1:<public half>:<base64 blob>"

Outside Redis: the `backup` kind's files (`rekey_backup_file`) and a lab's
`runtime/auth/authority.enc` (the CLI, through bke.adapters.runtime.nats_security).

Why a key at a time under WATCH: the owners write these records while a rotation runs (certs
saves a PKI, renews credentials). A record read, re-encrypted and written back without WATCH
could put an old value back over a newer one; under WATCH, a record that changed in between is
read again (and what its owner wrote is already under whatever key the owner holds, which every
holder decrypts). Nothing else of a record changes: no version is bumped, so no reader reloads.

Errors::

    PermanentError
     └─ DecryptError     a blob under a key the given keyring does not hold (bke.core.secrets.at_rest)
    TemporaryError
     └─ a record that kept changing under the rotation (run it again)
"""
from __future__ import annotations

import base64
import os
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from redis.asyncio import Redis
from redis.exceptions import WatchError

from bke.core.errors import TemporaryError
from bke.adapters.pki.api_credentials import credential_aad
from bke.core.pki.store import key_aad
from bke.core.secrets.at_rest import SecretBox, blob_key_id
from bke.core.secrets.signing import STORED_KEY_AAD as SIGNING_AAD
from bke.core.secrets.snapshot_key import STORED_KEY_AAD as SNAPSHOT_AAD
from bke.core.secrets.snapshot_key import join_stored, split_stored
from bke.core.secrets import record_signing
from .backup import MAGIC as BACKUP_MAGIC
from .keys.certs import api_credentials_key, pki_key
from .keys.auth import auth_authority_key
from .keys.trust import command_signing_key, command_signing_next_key, etcd_snapshot_key, record_signing_key

__all__ = ["FAMILIES", "Family", "RekeyReport", "census", "reencrypt_kind", "rekey_backup_file"]

ATTEMPTS = 20  # a record rewritten by its owner this many times in a row: TemporaryError


@dataclass(frozen=True)
class Codec:
    """How a stored value holds its at-rest blob: (kept part, blob) and back."""

    open: Callable[[bytes], tuple[bytes, bytes]]
    close: Callable[[bytes, bytes], bytes]


RAW = Codec(lambda v: (b"", v), lambda kept, blob: blob)
BASE64 = Codec(lambda v: (b"", base64.b64decode(v)), lambda kept, blob: base64.b64encode(blob))
SNAPSHOT = Codec(split_stored, join_stored)
RECORD_KEY = Codec(record_signing.split_stored, record_signing.join_stored)


def _per_cluster(name: Callable[[str], str]) -> tuple[str, Callable[[str], str]]:
    """A per-cluster family's SCAN pattern (bke.adapters.state.keys spells it, with `*` for the cluster),
    and how to read the cluster back from one of its keys."""
    pattern = name("*")
    head, tail = pattern.split("*")
    return pattern, lambda key: key[len(head):len(key) - len(tail)]


_PKI_KEYS, _pki_cluster = _per_cluster(lambda c: pki_key(c, "keys"))
_API, _api_cluster = _per_cluster(api_credentials_key)


@dataclass(frozen=True)
class Family:
    kind: str
    match: str  # a key's name, or a SCAN pattern when it has a `*`
    form: Literal["string", "hash"]
    aad: Callable[[str, str], bytes]  # (key, hash field or "") -> the blob's aad
    codec: Codec = RAW


FAMILIES: tuple[Family, ...] = (
    Family("pki", _PKI_KEYS, "hash", lambda k, f: key_aad(_pki_cluster(k), f), BASE64),
    Family("api", _API, "hash", lambda k, f: credential_aad(_api_cluster(k), f)),
    Family("signing", command_signing_key(), "string", lambda k, f: SIGNING_AAD),
    Family("signing", command_signing_next_key(), "string", lambda k, f: SIGNING_AAD),  # a rollover's next key
    Family("snapshot", etcd_snapshot_key(), "string", lambda k, f: SNAPSHOT_AAD, SNAPSHOT),
    Family("authority", auth_authority_key(), "string", lambda k, f: k.encode()),
    Family("plan", record_signing_key("plan"), "string", lambda k, f: record_signing.record_key_aad("plan"), RECORD_KEY),
    Family("render", record_signing_key("render"), "string", lambda k, f: record_signing.record_key_aad("render"),
           RECORD_KEY),
)


@dataclass
class RekeyReport:
    kind: str
    keys: int = 0  # Redis keys walked
    blobs: int = 0  # encrypted values among them
    rewritten: int = 0  # re-encrypted under the current key now
    by_key: Counter[str] = field(default_factory=Counter)  # key id -> blobs under it, after


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _bytes(v: Any) -> bytes:
    return v if isinstance(v, bytes) else str(v).encode()


async def _keys(redis: Redis, fam: Family) -> AsyncIterator[str]:
    if "*" not in fam.match:
        if await redis.exists(fam.match):
            yield fam.match
        return
    async for key in redis.scan_iter(match=fam.match, count=1000, _type=fam.form):
        yield _text(key)


async def _read(pipe: Any, fam: Family, key: str) -> dict[str, bytes]:
    if fam.form == "hash":
        return {_text(f): _bytes(v) for f, v in (await pipe.hgetall(key)).items()}
    value = await pipe.get(key)
    return {} if value is None else {"": _bytes(value)}


async def _rewrap_key(redis: Redis, fam: Family, key: str, box: SecretBox | None, report: RekeyReport) -> None:
    """One key's values under `box`'s current key (`box` None: only counted)."""
    for _ in range(ATTEMPTS):
        async with redis.pipeline(transaction=True) as pipe:
            await pipe.watch(key)
            values = await _read(pipe, fam, key)
            changed: dict[str, bytes] = {}
            for name, value in values.items():
                kept, blob = fam.codec.open(value)
                new = box.reencrypt(blob, fam.aad(key, name)) if box is not None else None
                if new is not None:
                    changed[name] = fam.codec.close(kept, new)
            if changed:
                pipe.multi()
                if fam.form == "hash":
                    pipe.hset(key, mapping=changed)  # type: ignore[arg-type]
                else:
                    pipe.set(key, changed[""], keepttl=True)
                try:
                    await pipe.execute()
                except WatchError:
                    continue  # its owner wrote it meanwhile: read it again
        report.keys += 1
        report.blobs += len(values)
        report.rewritten += len(changed)
        for name, value in values.items():
            report.by_key[blob_key_id(fam.codec.open(changed.get(name, value))[1]) or "?"] += 1
        return
    raise TemporaryError(f"{key} kept changing while it was re-encrypted: run the rotation again", delay=1.0)


async def reencrypt_kind(redis: Redis, kind: str, box: SecretBox) -> RekeyReport:
    """Every record of `kind` under `box`'s current key; what is already is left alone."""
    report = RekeyReport(kind)
    for fam in (f for f in FAMILIES if f.kind == kind):
        async for key in _keys(redis, fam):
            await _rewrap_key(redis, fam, key, box, report)
    return report


async def census(redis: Redis, kind: str) -> RekeyReport:
    """How many of `kind`'s blobs are under each key id (nothing written; no key needed)."""
    report = RekeyReport(kind)
    for fam in (f for f in FAMILIES if f.kind == kind):
        async for key in _keys(redis, fam):
            await _rewrap_key(redis, fam, key, None, report)
    return report


def rekey_backup_file(path: Path, box: SecretBox) -> bool:
    """A `bke state backup` file under `box`'s current key, rewritten in place through a renamed
    new file (0600); False when it is under that key already."""
    blob = path.read_bytes()
    if not blob.startswith(BACKUP_MAGIC):
        raise ValueError(f"{path}: not a BKE state backup (bad header)")
    new = box.reencrypt(blob[len(BACKUP_MAGIC):], BACKUP_MAGIC)
    if new is None:
        return False
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, BACKUP_MAGIC + new)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return True
