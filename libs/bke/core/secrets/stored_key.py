"""A deployment's key kept sealed in a store, made once: the command-signing key
(bke.core.secrets.signing) and the etcd snapshot key (bke.core.secrets.snapshot_key).

Why one way for both: any replica may be the first to need the key, so making it must be safe
when several race. The first `SET NX` wins and every caller reads back what is stored, so all of
them hold the same key. The store is any object with `get` / `set(..., nx=True)` (Redis, in
practice): no Redis import here, since the node agent imports these modules.
"""
from __future__ import annotations

from typing import Any, Awaitable, Protocol, TypeVar

from .at_rest import SecretBox

__all__ = ["AsyncStore", "SealedKey", "SyncStore", "ensure_stored", "ensure_stored_sync"]


class AsyncStore(Protocol):
    def get(self, name: str) -> Awaitable[Any]: ...
    def set(self, name: str, value: bytes, *, nx: bool = ...) -> Awaitable[Any]: ...


class SyncStore(Protocol):
    def get(self, name: str) -> Any: ...
    def set(self, name: str, value: bytes, *, nx: bool = ...) -> Any: ...


K = TypeVar("K", bound="SealedKey")


class SealedKey(Protocol):
    """A key that makes itself and seals itself for the store."""

    @classmethod
    def generate(cls: type[K]) -> K: ...
    def seal_for_store(self, box: SecretBox) -> bytes: ...
    @classmethod
    def from_store(cls: type[K], blob: bytes, box: SecretBox) -> K: ...


async def ensure_stored(store: AsyncStore, name: str, box: SecretBox, kind: type[K]) -> K:
    """The key stored under `name`, made if missing; concurrent callers get the same key."""
    blob = await store.get(name)
    if blob is None:
        await store.set(name, kind.generate().seal_for_store(box), nx=True)
        blob = await store.get(name)
    return kind.from_store(blob, box)


def ensure_stored_sync(store: SyncStore, name: str, box: SecretBox, kind: type[K]) -> K:
    """`ensure_stored` for synchronous callers (the lab, the CLI, `bke state init`)."""
    blob = store.get(name)
    if blob is None:
        store.set(name, kind.generate().seal_for_store(box), nx=True)
        blob = store.get(name)
    return kind.from_store(blob, box)
