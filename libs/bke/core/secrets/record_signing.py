"""Plans and rendered file sets carry their writer's Ed25519 signature; every reader checks it.

Why: certs decides from the plan which node is given which key, and the dispatcher signs
commands that carry the renderer's files. With the Redis ACL as their only guard, whoever could
write those keys (the admin user, a restored backup, a Redis replica's operator) could have
certs issue a node's certificates to another host or have the dispatcher sign a file of their
choosing. Now a record is believed only with the signature of the key its writer alone holds.

The writers and their keys (`WRITERS`): `plan` (the planner, and the upgrader, which replaces
the plan when an upgrade or an apply succeeds) and `render` (the renderer). Each private half is
stored like the command-signing key (bke.core.secrets.signing): encrypted at rest with the
key kind of the same name (bke.core.secrets.key_kinds), which only the writer's processes are
given. The record carries the public half in clear, as the etcd snapshot key's does, in text
(any Redis client reads it, one that decodes answers too)::

    BKEREC1:<base64 public key>:<base64 at-rest blob of the private key>   (aad "bke/record-signing-key/<writer>")

so that readers take the public half from it without any key file. Only the admin user writes
these records (`bke state init`; bke.adapters.runtime.redis_acl): a service's Redis user,
writers included, reads them and cannot replace a public half.

What is signed (`record_message`): a header naming the record kind, the cluster and its
binding (for a plan the cluster's incarnation and the plan's generation; for a node's rendered
files the node and the render's digest), then the SHA-256 of the stored bytes. So a signed
plan of cluster A does not verify as cluster B's, a node's files do not verify as another
node's, and a plan of an older generation or another incarnation does not verify under the
binding stored with it. Why a digest of the bytes and not the bytes: a 5,000-node plan is
megabytes, Ed25519 hashes its message twice with SHA-512, and one SHA-256 pass is cheaper
than either (bench/record_signatures.py).

The signature's form: `<key id>.<base64 signature>`, the key id letting a refusal say "signed
by another key" rather than "altered".

Errors (permanent: retrying cannot make a bad signature good)::

    PermanentError
     ├─ RecordSignatureError   a record with no signature, one by another key, or one that
     │                         does not match its bytes and binding; names the record
     └─ RecordKeyError         a stored signing key that is cut short, not Ed25519, or whose
                               halves disagree (DecryptError, bke.core.secrets.at_rest: the
                               wrong at-rest key)
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Sequence

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from bke.core.errors import PermanentError
from .at_rest import SecretBox

__all__ = [
    "WRITERS",
    "RecordKeyError",
    "RecordSignatureError",
    "RecordSigner",
    "RecordVerifier",
    "VERIFIED_KEPT",
    "join_stored",
    "record_key_aad",
    "record_message",
    "split_stored",
    "stored_public",
]

# writer -> the services whose processes hold its private half (its at-rest kind's file)
WRITERS: dict[str, tuple[str, ...]] = {"plan": ("planner", "upgrader"), "render": ("renderer",)}
_STORED = "BKEREC1"  # the stored key's form (module docstring)
_PUB = 32
_FORMAT = "bke-record-v1"


class RecordSignatureError(PermanentError):
    """A record whose signature is missing, by another key, or does not match."""

    def __init__(self, record: str, why: str) -> None:
        super().__init__(f"{record}: {why}; it is not used")
        self.record, self.why = record, why


class RecordKeyError(PermanentError):
    """A stored record-signing key that cannot be used."""


def record_key_aad(writer: str) -> bytes:
    """What binds a stored private half to its writer's record (bke.core.secrets.at_rest)."""
    if writer not in WRITERS:
        raise ValueError(f"unknown record writer {writer!r} (one of {', '.join(WRITERS)})")
    return f"bke/record-signing-key/{writer}".encode()


def _raw_public(public: Ed25519PublicKey) -> bytes:
    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def _key_id(raw_public: bytes) -> str:
    return hashlib.sha256(raw_public).hexdigest()[:16]


def record_message(kind: str, cluster: str, binding: Sequence[str], data: bytes) -> bytes:
    """The bytes a signature covers: header (JSON: unambiguous whatever the names hold) and
    the SHA-256 of `data`."""
    head = json.dumps([_FORMAT, kind, cluster, *binding], separators=(",", ":")).encode()
    return head + b"\n" + hashlib.sha256(data).hexdigest().encode()


def _parts(writer: str, blob: bytes | str) -> tuple[bytes, bytes]:
    """(raw public half, at-rest blob) of a stored key."""
    record_key_aad(writer)
    text = blob.decode("ascii", "replace") if isinstance(blob, bytes) else blob
    parts = text.split(":")
    head, public, sealed = parts if len(parts) == 3 else ("", "", "")
    try:
        raw, box = base64.b64decode(public, validate=True), base64.b64decode(sealed, validate=True)
    except (binascii.Error, ValueError):
        raw, box = b"", b""
    if head != _STORED or len(raw) != _PUB or not box:
        raise RecordKeyError(f"the stored {writer}-signing key is not in its form (BKEREC1:<public>:<sealed>)")
    return raw, box


def stored_public(writer: str, blob: bytes | str) -> bytes:
    """The raw public half of a stored signing key, read without its at-rest key."""
    return _parts(writer, blob)[0]


# Signatures a verifier found good, remembered (as a digest of the message and the signature)
# so that the same record read again is not verified again: the dispatcher reads each node's
# rendered files in every phase, 40,000 Ed25519 checks of 10,000 unchanged records in one
# 10,000-node install. Bounded: past this many, it starts afresh.
VERIFIED_KEPT = 50_000


class RecordVerifier:
    """A writer's public half, as a reader holds it."""

    def __init__(self, writer: str, raw_public: bytes) -> None:
        try:
            self._public = Ed25519PublicKey.from_public_bytes(raw_public)
        except ValueError:
            raise RecordKeyError(f"the {writer}-signing key's public half is no Ed25519 key") from None
        self.writer, self.key_id = writer, _key_id(raw_public)
        self._verified: set[bytes] = set()  # see VERIFIED_KEPT

    @classmethod
    def from_stored(cls, writer: str, blob: bytes | str) -> RecordVerifier:
        return cls(writer, stored_public(writer, blob))

    def verify(self, record: str, kind: str, cluster: str, binding: Sequence[str], data: bytes,
               signature: str | None) -> None:
        """Return if `signature` is this writer's over `data` and its binding, else raise
        RecordSignatureError naming `record`."""
        if not signature:
            raise RecordSignatureError(record, f"it carries no signature of the {self.writer} writer")
        key_id, _, sig = signature.partition(".")
        if key_id != self.key_id:
            raise RecordSignatureError(record, f"it is signed by key {key_id}, not by the {self.writer} writer's "
                                               f"key {self.key_id}")
        message = record_message(kind, cluster, binding, data)
        # Ed25519 verification is a function of the key, the message and the signature alone:
        # one this key found good before is good again
        seen = hashlib.sha256(message + b"\n" + sig.encode()).digest()
        if seen in self._verified:
            return
        try:
            self._public.verify(base64.b64decode(sig, validate=True), message)
        except (InvalidSignature, binascii.Error, ValueError):
            raise RecordSignatureError(record, f"its signature does not match its bytes, cluster and binding "
                                               f"({', '.join(binding)})") from None
        if len(self._verified) >= VERIFIED_KEPT:
            self._verified.clear()
        self._verified.add(seen)


class RecordSigner:
    """A writer's private half, as its processes hold it. `repr` shows only the key id."""

    def __init__(self, writer: str, key: Ed25519PrivateKey) -> None:
        record_key_aad(writer)
        self.writer, self._key = writer, key
        self.verifier = RecordVerifier(writer, _raw_public(key.public_key()))
        self.key_id = self.verifier.key_id

    def __repr__(self) -> str:
        return f"RecordSigner({self.writer}, key_id={self.key_id})"

    @classmethod
    def generate(cls, writer: str) -> RecordSigner:
        return cls(writer, Ed25519PrivateKey.generate())

    def sign(self, kind: str, cluster: str, binding: Sequence[str], data: bytes) -> str:
        sig = self._key.sign(record_message(kind, cluster, binding, data))
        return f"{self.key_id}.{base64.b64encode(sig).decode()}"

    def seal_for_store(self, box: SecretBox) -> bytes:
        raw = self._key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                                      serialization.NoEncryption())
        sealed = box.encrypt(raw, record_key_aad(self.writer))
        return join_stored(f"{_STORED}:{base64.b64encode(_raw_public(self._key.public_key())).decode()}:".encode(), sealed)

    @classmethod
    def from_store(cls, writer: str, blob: bytes | str, box: SecretBox) -> RecordSigner:
        public, sealed = _parts(writer, blob)
        raw = box.decrypt(sealed, record_key_aad(writer))  # DecryptError names the key, never content
        try:
            signer = cls(writer, Ed25519PrivateKey.from_private_bytes(raw))
        except ValueError:
            raise RecordKeyError(f"the stored {writer}-signing key is not an Ed25519 key") from None
        if signer.verifier.key_id != _key_id(public):
            raise RecordKeyError(f"the stored {writer}-signing key's public half is not its private half's: "
                                 "the record was altered")
        return signer


def split_stored(blob: bytes) -> tuple[bytes, bytes]:
    """(kept part: the text up to the sealed half, the at-rest blob): how `bke keys rotate`
    re-encrypts it (bke.adapters.state.rekey)."""
    head, _, sealed = blob.rpartition(b":")
    return head + b":", base64.b64decode(sealed)


def join_stored(kept: bytes, sealed: bytes) -> bytes:
    return kept + base64.b64encode(sealed)
