"""How a spec travels in a request: inline when it fits in one NATS message, else by reference
(`specRef` = `<bucket>/<key>` in the JetStream object store, bke.adapters.bus.blobs). The install, the
diff (`bke apply --dry-run`) and the apply choose the same way, here."""
from __future__ import annotations

from collections.abc import Awaitable, Callable

from nats.js import JetStreamContext

from bke.adapters.bus import put_blob
from bke.adapters.bus.streams import OBJECT_BUCKET, require_streams

__all__ = ["INLINE_LIMIT", "blob_put", "spec_fields"]

INLINE_LIMIT = 900 * 1024  # below NATS' 1 MiB max_payload, with room for the envelope

Put = Callable[[bytes], Awaitable[str]]


def blob_put(js: JetStreamContext, key: str) -> Put:
    """Stores the bytes under `key` of the blob bucket and gives its reference."""

    async def put(data: bytes) -> str:
        await require_streams(js)  # declared at deploy time; a clear error if not
        return await put_blob(js, OBJECT_BUCKET, key, data)

    return put


async def spec_fields(spec: bytes, put: Put) -> dict[str, str]:
    """The request's spec fields: `{"spec": text}`, or `{"spec_ref": ref}` once `put` stored it."""
    if len(spec) <= INLINE_LIMIT:
        return {"spec": spec.decode()}
    return {"spec_ref": await put(spec)}
