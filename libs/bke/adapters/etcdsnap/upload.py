"""Add one object to a JetStream object store with publishes only (what a node agent may do).

Why not nats-py's `ObjectStore.put`: before writing it reads the object's current meta with
`$JS.API.STREAM.MSG.GET.<stream>` (the payload-carrying form, which could read any message of
the stream and which an agent is denied, bke.adapters.auth.permissions) and purges old chunks with
`STREAM.PURGE`. An agent adds new objects only, so it needs neither: it publishes the chunks on
`$O.<bucket>.C.<nuid>` and then the meta message on `$O.<bucket>.M.<base64url(name)>`, the object
store's layout (nats-io/nats-architecture-and-design
adr/ADR-20.md; the same templates as nats-py 2.16 nats/js/object_store.py, imported from it).
The meta is nats-py's own `ObjectInfo`, so every reader (nats-py, nats.go, the `nats` CLI) sees
an ordinary object whose digest it verifies on `get`.

An object becomes visible only with its meta message, after every chunk is stored (each
publish waits for its JetStream ack): a run cut short leaves invisible chunks, never a partial
object.
"""
from __future__ import annotations

import base64
import hashlib
import json
import secrets
from collections.abc import Iterable
from datetime import datetime

from nats.js import JetStreamContext
from nats.js.api import ObjectInfo, ObjectMetaOptions
from nats.js.object_store import OBJ_CHUNKS_PRE_TEMPLATE, OBJ_DIGEST_TEMPLATE, OBJ_META_PRE_TEMPLATE

__all__ = ["CHUNK", "meta_subject", "publish_object"]

CHUNK = 256 * 1024  # bytes per chunk message, well under NATS's default 1 MiB max_payload


def meta_subject(bucket: str, name: str) -> str:
    return OBJ_META_PRE_TEMPLATE.format(bucket=bucket, obj=base64.urlsafe_b64encode(name.encode()).decode())


async def publish_object(js: JetStreamContext, bucket: str, name: str, parts: Iterable[bytes], *,
                         headers: dict[str, list[str]], description: str, now: datetime) -> ObjectInfo:
    """Store `parts` (any sizes; re-cut into `CHUNK`s) as object `name`; return its meta."""
    nuid = secrets.token_hex(11)  # a fresh chunk subject token, like a NUID
    chunk_subject = OBJ_CHUNKS_PRE_TEMPLATE.format(bucket=bucket, obj=nuid)
    digest = hashlib.sha256()
    size = chunks = 0
    pending = bytearray()

    async def send(data: bytes) -> None:
        nonlocal size, chunks
        digest.update(data)
        await js.publish(chunk_subject, data)
        size, chunks = size + len(data), chunks + 1

    for part in parts:
        pending += part
        while len(pending) >= CHUNK:
            await send(bytes(pending[:CHUNK]))
            del pending[:CHUNK]
    if pending:
        await send(bytes(pending))
    info = ObjectInfo(
        name=name, bucket=bucket, nuid=nuid, size=size, chunks=chunks, mtime=now.isoformat(),
        digest=OBJ_DIGEST_TEMPLATE.format(digest=base64.urlsafe_b64encode(digest.digest()).decode()),
        description=description, headers=headers, options=ObjectMetaOptions(max_chunk_size=CHUNK),
    )
    # No `Nats-Rollup: sub` header (nats-py's put sends one to replace an object's meta): the
    # snapshot bucket refuses rollups (bke.adapters.bus.streams.APPEND_ONLY_BUCKETS), and a new object has
    # no meta to replace.
    await js.publish(meta_subject(bucket, name), json.dumps(info.as_dict()).encode())
    return info
