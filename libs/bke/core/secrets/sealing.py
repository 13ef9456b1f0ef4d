"""Seal data to one agent: only the holder of that agent's X25519 private key can open it.

Why: a node's files (its private keys included) cross the bus and may sit in a stream or an
object store; sealing makes them readable by that node's agent alone, wherever they travel.

Scheme (version 1), a minimal ECIES:

* a fresh ephemeral X25519 key pair per message; shared secret with the recipient's public key;
* HKDF-SHA256 over the shared secret (salt: ephemeral public || recipient public,
  info ``b"bke sealed v1"``) gives an AES-256-GCM key used once;
* associated data: magic || recipient key id || ephemeral public, so a blob names and is bound to
  its recipient; opening with another key fails with :class:`NotForThisKey` before any crypto.

Blob::

    b"BKES1" | recipient key id (16 bytes) | ephemeral public (32) | nonce (12) | ciphertext + tag

Errors (permanent)::

    PermanentError
     └─ SealedDataError      malformed or tampered blob
         └─ NotForThisKey    sealed to another agent's key
"""
from __future__ import annotations

import hashlib
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from bke.core.errors import PermanentError

__all__ = [
    "NotForThisKey",
    "SealedDataError",
    "agent_key_id",
    "generate_agent_key",
    "open_sealed",
    "private_key_from_pem",
    "private_key_to_pem",
    "public_key_from_pem",
    "public_key_from_raw",
    "public_key_to_pem",
    "public_key_to_raw",
    "seal",
]

_MAGIC = b"BKES1"
_KID = 16
_PUB = 32
_NONCE = 12
_HEADER = len(_MAGIC) + _KID + _PUB + _NONCE
_INFO = b"bke sealed v1"


class SealedDataError(PermanentError):
    pass


class NotForThisKey(SealedDataError):
    pass


def generate_agent_key() -> X25519PrivateKey:
    """A new agent key pair; the agent keeps the private key, the dispatcher gets the public one."""
    return X25519PrivateKey.generate()


def private_key_to_pem(key: X25519PrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def private_key_from_pem(pem: bytes) -> X25519PrivateKey:
    key = serialization.load_pem_private_key(pem, password=None)
    if not isinstance(key, X25519PrivateKey):
        raise SealedDataError("not an X25519 private key")
    return key


def public_key_to_raw(key: X25519PublicKey) -> bytes:
    """The 32-byte form, e.g. for a registration message (base64 it for JSON)."""
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def public_key_from_raw(raw: bytes) -> X25519PublicKey:
    if len(raw) != _PUB:
        raise SealedDataError(f"an X25519 public key is {_PUB} bytes, got {len(raw)}")
    return X25519PublicKey.from_public_bytes(raw)


def public_key_to_pem(key: X25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def public_key_from_pem(pem: bytes) -> X25519PublicKey:
    key = serialization.load_pem_public_key(pem)
    if not isinstance(key, X25519PublicKey):
        raise SealedDataError("not an X25519 public key")
    return key


def _kid(public: X25519PublicKey) -> bytes:
    return hashlib.sha256(b"bke-agent-key-id\0" + public_key_to_raw(public)).digest()[:_KID]


def agent_key_id(public: X25519PublicKey) -> str:
    """Hex id of an agent public key: what a blob names as its recipient (safe to log)."""
    return _kid(public).hex()


def _aead(shared: bytes, eph_raw: bytes, recipient_raw: bytes) -> AESGCM:
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=eph_raw + recipient_raw, info=_INFO).derive(shared)
    return AESGCM(key)


def seal(recipient: X25519PublicKey, data: bytes) -> bytes:
    """Encrypt ``data`` so that only ``recipient``'s private key opens it."""
    eph = X25519PrivateKey.generate()
    eph_raw = public_key_to_raw(eph.public_key())
    recipient_raw = public_key_to_raw(recipient)
    kid = _kid(recipient)
    nonce = os.urandom(_NONCE)
    aad = _MAGIC + kid + eph_raw
    ct = _aead(eph.exchange(recipient), eph_raw, recipient_raw).encrypt(nonce, data, aad)
    return aad + nonce + ct


def open_sealed(private_key: X25519PrivateKey, blob: bytes) -> bytes:
    """Decrypt a :func:`seal` blob addressed to ``private_key``'s public key."""
    if len(blob) < _HEADER + 16 or not blob.startswith(_MAGIC):
        raise SealedDataError("not a BKE sealed blob (bad header or too short)")
    public = private_key.public_key()
    kid = blob[len(_MAGIC):len(_MAGIC) + _KID]
    if kid != _kid(public):
        raise NotForThisKey(f"sealed to agent key {kid.hex()}, this agent's key is {agent_key_id(public)}")
    eph_raw = blob[len(_MAGIC) + _KID:len(_MAGIC) + _KID + _PUB]
    nonce = blob[_HEADER - _NONCE:_HEADER]
    try:
        shared = private_key.exchange(X25519PublicKey.from_public_bytes(eph_raw))
        return _aead(shared, eph_raw, public_key_to_raw(public)).decrypt(nonce, blob[_HEADER:], blob[:_HEADER - _NONCE])
    except (InvalidTag, ValueError):
        raise SealedDataError("authentication failed: the sealed blob was altered") from None
