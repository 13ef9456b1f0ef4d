"""Payloads too large for one NATS message travel by reference: `<bucket>/<key>`.

A 5,000-node spec is several MiB; NATS refuses messages over max_payload (1 MiB).
"""
from __future__ import annotations

import io
from typing import Any

from nats.js import JetStreamContext
from nats.js.errors import NotFoundError, ObjectNotFoundError

from bke.core.errors import PermanentError

__all__ = ["BlobTooLarge", "put_blob", "get_blob"]


async def put_blob(js: JetStreamContext, bucket: str, key: str, data: bytes) -> str:
    # The bucket is declared at deploy time (bke.adapters.bus.streams.ensure_buckets), with its time to
    # live: its writers only add objects (bke.adapters.auth.jetstream_grants).
    store = await js.object_store(bucket)
    await store.put(key, data)
    return f"{bucket}/{key}"


class _Capped(io.BufferedIOBase):
    """A sink that refuses to grow past `limit`: the object's recorded size is the writer's word,
    so the chunks themselves are counted too."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit, self.buf = limit, bytearray()

    def write(self, data: Any) -> int:
        if len(self.buf) + len(data) > self.limit:
            raise BlobTooLarge(None, self.limit)
        self.buf += data
        return len(data)


class BlobTooLarge(PermanentError):
    def __init__(self, size: int | None, limit: int):
        super().__init__(f"the object is {size if size is not None else 'more than ' + str(limit)} bytes; the limit is {limit}")
        self.size, self.limit = size, limit


async def get_blob(js: JetStreamContext, ref: str, limit: int | None = None) -> bytes:
    """The object's bytes. With `limit`, an object larger than it is refused (BlobTooLarge) from
    its metadata before any chunk is read, and a chunk stream longer than announced is cut off."""
    bucket, _, key = ref.partition("/")
    try:
        store = await js.object_store(bucket)
        if limit is None:
            return (await store.get(key)).data or b""
        info = await store.get_info(key)
        if info.size is not None and info.size > limit:
            raise BlobTooLarge(info.size, limit)
        sink = _Capped(limit)
        await store.get(key, writeinto=sink)
        return bytes(sink.buf)
    except (NotFoundError, ObjectNotFoundError) as exc:
        raise PermanentError(f"specRef {ref!r} not found in the object store") from exc
