"""The deployment's etcd snapshot key (X25519): agents seal snapshots to it, BKE opens them.

Why a key of its own: an etcd snapshot holds every Secret of the cluster, so it is sealed on the
node before it reaches the object store (bke.etcdsnap). Agents are given only the public half,
inside the signed command that asks for the snapshot (`EtcdSnapshot.recipient_b64`); the private
half is kept like the command-signing key (bke.secrets.signing): made once per deployment
(`ensure_snapshot_key`, `SET NX`, so concurrent makers agree), stored encrypted with the
operator key (bke.secrets.at_rest) under `bke.state.keys.etcd_snapshot_key()`, so that a state
backup carries it and a reader of Redis or of the object store alone can open nothing.

Who wrote a snapshot: sealing needs only the public key, so a snapshot's record carries a MAC
made by the agent that took it (`record_mac`): HMAC-SHA256 with a key both sides derive by X25519
from the agent's private key and this key's public half (HKDF-SHA256, info "bke etcd snapshot
record v1", salt both public keys), the static-static Diffie-Hellman a NaCl `box` uses for the
same purpose. BKE recomputes it from its private half and the agent key *it provisioned* for the
node (`SnapshotKey.record_mac_ok`), so a record is believed only from that node's agent.

No Redis import: the store is any object with `get` / `set(..., nx=True)` (as in signing).

Errors (permanent)::

    PermanentError
     ├─ SnapshotKeyError   a stored key that is no X25519 key; a malformed public key
     ├─ DecryptError       the operator key is not the one that stored it (bke.secrets.at_rest)
     └─ SealedDataError    a blob not sealed to this key, or altered (bke.secrets.sealing)
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from typing import Any, Awaitable, Protocol

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

from ..errors import PermanentError
from .at_rest import SecretBox
from .sealing import agent_key_id, open_sealed, public_key_from_raw, public_key_to_raw, seal

__all__ = [
    "SnapshotKey",
    "SnapshotKeyError",
    "ensure_snapshot_key",
    "ensure_snapshot_key_sync",
    "read_snapshot_key",
    "record_mac",
    "recipient_from_b64",
]

_AAD = b"bke/etcd-snapshot-key"  # binds the stored blob to this record (bke.secrets.at_rest)
_RECORD_INFO = b"bke etcd snapshot record v1"


def _mac_key(shared: bytes, agent: X25519PublicKey, snapshot: X25519PublicKey) -> bytes:
    salt = public_key_to_raw(agent) + public_key_to_raw(snapshot)
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=salt, info=_RECORD_INFO).derive(shared)


def record_mac(agent_key: X25519PrivateKey, snapshot_public: X25519PublicKey, data: bytes) -> str:
    """The agent's MAC over a record's bytes, for the holder of the snapshot key to check."""
    key = _mac_key(agent_key.exchange(snapshot_public), agent_key.public_key(), snapshot_public)
    return hmac.new(key, data, hashlib.sha256).hexdigest()


class SnapshotKeyError(PermanentError):
    """The snapshot key cannot be used (corrupt record, malformed public key)."""


def recipient_from_b64(text: str) -> X25519PublicKey:
    """The public half as a command carries it (base64 of the raw 32 bytes)."""
    try:
        return public_key_from_raw(base64.b64decode(text, validate=True))
    except (binascii.Error, ValueError, PermanentError) as exc:
        raise SnapshotKeyError(f"not a base64 X25519 public key: {exc}") from None


class SnapshotKey:
    """The private half, as BKE holds it. `repr` shows only the key id."""

    def __init__(self, key: X25519PrivateKey) -> None:
        self._key = key
        self.public = key.public_key()
        self.key_id = agent_key_id(self.public)  # what a sealed blob names as its recipient

    def __repr__(self) -> str:
        return f"SnapshotKey(key_id={self.key_id})"

    @classmethod
    def generate(cls) -> SnapshotKey:
        return cls(X25519PrivateKey.generate())

    @property
    def public_b64(self) -> str:
        return base64.b64encode(public_key_to_raw(self.public)).decode()

    def seal(self, data: bytes) -> bytes:
        """Seal to this key (tests; agents seal with the public half only)."""
        return seal(self.public, data)

    def open(self, blob: bytes) -> bytes:
        return open_sealed(self._key, blob)

    def record_mac_ok(self, agent_public: X25519PublicKey, data: bytes, mac: str) -> bool:
        """True if `mac` over `data` was made with the private key of `agent_public`."""
        key = _mac_key(self._key.exchange(agent_public), agent_public, self.public)
        return hmac.compare_digest(hmac.new(key, data, hashlib.sha256).hexdigest(), mac)

    def seal_for_store(self, box: SecretBox) -> bytes:
        raw = self._key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                                      serialization.NoEncryption())
        return box.encrypt(raw, _AAD)

    @classmethod
    def from_store(cls, blob: bytes, box: SecretBox) -> SnapshotKey:
        raw = box.decrypt(blob, _AAD)  # DecryptError names the wrong key, never content
        try:
            return cls(X25519PrivateKey.from_private_bytes(raw))
        except ValueError:
            raise SnapshotKeyError("the stored etcd snapshot key is not an X25519 key") from None


class _AsyncStore(Protocol):
    def get(self, name: str) -> Awaitable[Any]: ...
    def set(self, name: str, value: bytes, *, nx: bool = ...) -> Awaitable[Any]: ...


class _SyncStore(Protocol):
    def get(self, name: str) -> Any: ...
    def set(self, name: str, value: bytes, *, nx: bool = ...) -> Any: ...


async def ensure_snapshot_key(store: _AsyncStore, name: str, box: SecretBox) -> SnapshotKey:
    """The deployment's snapshot key, made if missing; concurrent callers get the same key (the
    first `SET NX` wins and every caller reads back what is stored)."""
    blob = await store.get(name)
    if blob is None:
        await store.set(name, SnapshotKey.generate().seal_for_store(box), nx=True)
        blob = await store.get(name)
    return SnapshotKey.from_store(blob, box)


def ensure_snapshot_key_sync(store: _SyncStore, name: str, box: SecretBox) -> SnapshotKey:
    """`ensure_snapshot_key` for synchronous callers (the lab, the CLI)."""
    blob = store.get(name)
    if blob is None:
        store.set(name, SnapshotKey.generate().seal_for_store(box), nx=True)
        blob = store.get(name)
    return SnapshotKey.from_store(blob, box)


def read_snapshot_key(store: _SyncStore, name: str, box: SecretBox) -> SnapshotKey | None:
    """The stored key, or None if this deployment never made one (a reader must not make a
    new key: it would open nothing sealed before)."""
    blob = store.get(name)
    return None if blob is None else SnapshotKey.from_store(blob, box)
