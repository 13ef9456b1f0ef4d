"""The deployment's etcd snapshot key (X25519): agents seal snapshots to it, BKE opens them.

Why a key of its own: an etcd snapshot holds every Secret of the cluster, so it is sealed on the
node before it reaches the object store (bke.core.etcdsnap). Agents are given only the public half,
inside the signed command that asks for the snapshot (`EtcdSnapshot.recipient_b64`); the private
half is kept like the command-signing key (bke.core.secrets.signing): made once per deployment
(`ensure_snapshot_key`, `SET NX`, so concurrent makers agree), stored encrypted with the
`snapshot` at-rest key (bke.core.secrets.key_kinds) under `bke.adapters.state.keys.trust.etcd_snapshot_key()`, so
that a state backup carries it and a reader of Redis or of the object store alone can open
nothing.

The stored record carries the public half in clear before the encrypted private half::

    b"BKESNAP1" | public key (32 bytes) | at-rest blob of the private key (aad "bke/etcd-snapshot-key")

so that the dispatcher, which asks agents for snapshots before a reset but never opens one,
reads the recipient (`stored_public_b64`) without holding the `snapshot` key. Its integrity is
the Redis ACL's: only the admin user writes the record (bke.adapters.runtime.redis_acl), as for the
agents' provisioned keys. Every holder of the key checks that the two halves agree
(`SnapshotKey.from_store`). A record of the older form (the blob alone) still opens; `bke state
init` rewrites it in this form (`upgrade_stored_form`).

Who wrote a snapshot: sealing needs only the public key, so a snapshot's record carries a MAC
made by the agent that took it (`record_mac`): HMAC-SHA256 with a key both sides derive by X25519
from the agent's private key and this key's public half (HKDF-SHA256, info "bke etcd snapshot
record v1", salt both public keys), the static-static Diffie-Hellman a NaCl `box` uses for the
same purpose. BKE recomputes it from its private half and the agent key *it provisioned* for the
node (`SnapshotKey.record_mac_ok`), so a record is believed only from that node's agent.

No Redis import: the store is any object with `get` / `set(..., nx=True)` (bke.core.secrets.stored_key,
as for the signing key).

Errors (permanent)::

    PermanentError
     ├─ SnapshotKeyError   a stored key that is no X25519 key, or whose halves disagree; a
     │                     malformed public key
     ├─ DecryptError       the `snapshot` key is not the one that stored it (bke.core.secrets.at_rest)
     └─ SealedDataError    a blob not sealed to this key, or altered (bke.core.secrets.sealing)
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

from bke.core.errors import PermanentError, TemporaryError
from .at_rest import SecretBox
from .sealing import agent_key_id, open_sealed, public_key_from_raw, public_key_to_raw, seal
from .stored_key import AsyncStore, SyncStore, ensure_stored, ensure_stored_sync

__all__ = [
    "STORED_KEY_AAD",
    "SnapshotKey",
    "SnapshotKeyError",
    "ensure_snapshot_key",
    "ensure_snapshot_key_sync",
    "read_snapshot_key",
    "read_snapshot_recipient",
    "record_mac",
    "recipient_from_b64",
    "join_stored",
    "split_stored",
    "stored_public_b64",
    "upgrade_stored_form",
]

STORED_KEY_AAD = b"bke/etcd-snapshot-key"  # binds the stored blob to this record (bke.core.secrets.at_rest)
_AAD = STORED_KEY_AAD
_STORED = b"BKESNAP1"  # the record's form with its public half (module docstring)
_PUB = 32
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
        return _STORED + public_key_to_raw(self.public) + box.encrypt(raw, _AAD)

    @classmethod
    def from_store(cls, blob: bytes, box: SecretBox) -> SnapshotKey:
        public, sealed = split_stored(blob)
        raw = box.decrypt(sealed, _AAD)  # DecryptError names the wrong key, never content
        try:
            key = cls(X25519PrivateKey.from_private_bytes(raw))
        except ValueError:
            raise SnapshotKeyError("the stored etcd snapshot key is not an X25519 key") from None
        if public and public != public_key_to_raw(key.public):
            raise SnapshotKeyError("the stored etcd snapshot key's public half is not its private half's: "
                                   "the record was altered")
        return key


def split_stored(blob: bytes) -> tuple[bytes, bytes]:
    """(public half or b"" for the older form, the at-rest blob of the private half)."""
    if blob.startswith(_STORED):
        public = blob[len(_STORED):len(_STORED) + _PUB]
        if len(public) != _PUB:
            raise SnapshotKeyError("the stored etcd snapshot key is cut short")
        return public, blob[len(_STORED) + _PUB:]
    return b"", blob


def join_stored(public: bytes, sealed: bytes) -> bytes:
    """Inverse of `split_stored` (a rotation re-encrypts the private half, keeps the public)."""
    return _STORED + public + sealed if public else sealed


def stored_public_b64(blob: bytes) -> str | None:
    """The recipient a snapshot is sealed to, read without the key (None: the older form)."""
    public, _ = split_stored(blob)
    return base64.b64encode(public).decode() if public else None


def upgrade_stored_form(blob: bytes, box: SecretBox) -> bytes | None:
    """The record in the form with its public half, or None when it has it already."""
    if split_stored(blob)[0]:
        return None
    return SnapshotKey.from_store(blob, box).seal_for_store(box)


async def ensure_snapshot_key(store: AsyncStore, name: str, box: SecretBox) -> SnapshotKey:
    """The deployment's snapshot key, made if missing (concurrent callers get the same key)."""
    return await ensure_stored(store, name, box, SnapshotKey)


def ensure_snapshot_key_sync(store: SyncStore, name: str, box: SecretBox) -> SnapshotKey:
    """`ensure_snapshot_key` for synchronous callers (the lab, the CLI)."""
    return ensure_stored_sync(store, name, box, SnapshotKey)


def read_snapshot_key(store: SyncStore, name: str, box: SecretBox) -> SnapshotKey | None:
    """The stored key, or None if this deployment never made one (a reader must not make a
    new key: it would open nothing sealed before)."""
    blob = store.get(name)
    return None if blob is None else SnapshotKey.from_store(blob, box)


async def read_snapshot_recipient(store: AsyncStore, name: str) -> str:
    """The public half, read without the key (the dispatcher: module docstring). TemporaryError
    while there is no record, or one of the older form: `bke state init` makes or rewrites it."""
    blob = await store.get(name)
    if blob is None:
        raise TemporaryError("no etcd snapshot key stored yet (`bke state init` makes it)", delay=30.0)
    public = stored_public_b64(blob)
    if public is None:
        raise TemporaryError("the etcd snapshot key is stored in its older form, without its public half: run "
                             "`bke state init` (it rewrites the record)", delay=30.0)
    return public
