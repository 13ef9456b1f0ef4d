"""Payloads too large for one NATS message travel by reference: `<bucket>/<key>`.

A 5,000-node spec is several MiB; NATS refuses messages over max_payload (1 MiB).
"""
from __future__ import annotations

from nats.js import JetStreamContext
from nats.js.object_store import ObjectStore
from nats.js.errors import NotFoundError, ObjectNotFoundError

from ..errors import PermanentError

__all__ = ["put_blob", "get_blob"]


async def _bucket(js: JetStreamContext, name: str) -> ObjectStore:
    try:
        return await js.object_store(name)
    except NotFoundError:  # BucketNotFoundError: the first put creates the bucket
        return await js.create_object_store(name)  # bucket positional: nats-py gotcha


async def put_blob(js: JetStreamContext, bucket: str, key: str, data: bytes) -> str:
    store = await _bucket(js, bucket)
    await store.put(key, data)
    return f"{bucket}/{key}"


async def get_blob(js: JetStreamContext, ref: str) -> bytes:
    bucket, _, key = ref.partition("/")
    try:
        store = await js.object_store(bucket)
        res = await store.get(key)
    except (NotFoundError, ObjectNotFoundError) as exc:
        raise PermanentError(f"specRef {ref!r} not found in the object store") from exc
    return res.data or b""
