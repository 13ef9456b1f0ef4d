"""Encryption at rest for the private keys the services keep (AES-256-GCM).

Why: CA keys and every other private key BKE stores (in Redis, or under ``DIR/.bke`` for the
offline ``bke certs issue``) must be useless to whoever reads the store alone. The operator
provides a 32-byte key in the file named by ``BKE_SECRET_KEY_FILE``; the store keeps ciphertext.

Blob format (version 1)::

    b"BKEAR1" | key id (8 bytes) | nonce (12 bytes) | AES-256-GCM ciphertext + tag

The key id (a hash of the key, not the key) is in the blob so that decrypting with another key
says "wrong key" instead of "corrupt". Callers bind each blob to where it belongs with ``aad``
(e.g. ``b"<cluster>/<instance>"``), so a blob copied to another record does not decrypt.

Key file: 32 raw bytes, or their base64 on one line (what :func:`create_key_file` writes).

Errors (all permanent: retrying cannot fix a key file)::

    PermanentError
     ├─ SecretKeyError
     │   ├─ SecretKeyMissing   BKE_SECRET_KEY_FILE unset, or the file does not exist
     │   └─ SecretKeyInvalid   unreadable, or not 32 bytes (raw or base64)
     └─ DecryptError           wrong key, wrong record (aad), or corrupt blob
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import NoReturn

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ..errors import PermanentError

__all__ = [
    "SECRET_KEY_ENV",
    "DecryptError",
    "SecretBox",
    "SecretKeyError",
    "SecretKeyInvalid",
    "SecretKeyMissing",
    "box_from_env",
    "create_key_file",
    "load_secret_box",
]

SECRET_KEY_ENV = "BKE_SECRET_KEY_FILE"
KEY_BYTES = 32
_MAGIC = b"BKEAR1"
_KID = 8
_NONCE = 12
_HEADER = len(_MAGIC) + _KID + _NONCE


class SecretKeyError(PermanentError):
    """The at-rest key cannot be used; the message names the file, never its content."""


class SecretKeyMissing(SecretKeyError):
    pass


class SecretKeyInvalid(SecretKeyError):
    pass


class DecryptError(PermanentError):
    pass


class SecretBox:
    """AES-256-GCM with one operator key. ``repr`` shows only the key id."""

    __slots__ = ("_aead", "_kid")

    def __init__(self, key: bytes) -> None:
        if len(key) != KEY_BYTES:
            raise SecretKeyInvalid(f"an at-rest key must be {KEY_BYTES} bytes, got {len(key)}")
        self._aead = AESGCM(key)
        self._kid = hashlib.sha256(b"bke-at-rest-key-id\0" + key).digest()[:_KID]

    @property
    def key_id(self) -> str:
        """A fingerprint safe to log (it reveals nothing about the key)."""
        return self._kid.hex()

    def __repr__(self) -> str:
        return f"SecretBox(key_id={self.key_id})"

    def __reduce__(self) -> NoReturn:
        raise TypeError("SecretBox is not picklable: the key must not leave this process")

    def encrypt(self, plaintext: bytes, aad: bytes = b"") -> bytes:
        """Encrypt with a fresh random nonce (so the same plaintext gives different bytes)."""
        nonce = os.urandom(_NONCE)
        return _MAGIC + self._kid + nonce + self._aead.encrypt(nonce, plaintext, _MAGIC + self._kid + aad)

    def decrypt(self, blob: bytes, aad: bytes = b"") -> bytes:
        """Inverse of :meth:`encrypt`; ``aad`` must be the one given at encryption."""
        if len(blob) < _HEADER + 16 or not blob.startswith(_MAGIC):
            raise DecryptError("not a BKE at-rest blob (bad header or too short)")
        kid = blob[len(_MAGIC):len(_MAGIC) + _KID]
        if kid != self._kid:
            raise DecryptError(f"encrypted with key {kid.hex()}, but the configured key is {self.key_id}")
        nonce = blob[len(_MAGIC) + _KID:_HEADER]
        try:
            return self._aead.decrypt(nonce, blob[_HEADER:], _MAGIC + kid + aad)
        except InvalidTag:
            raise DecryptError("authentication failed: corrupt blob or blob of another record") from None


def _parse_key_bytes(raw: bytes, path: Path) -> bytes:
    if len(raw) == KEY_BYTES:
        return raw
    text = raw.strip()
    try:
        key = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        key = b""
    if len(key) != KEY_BYTES:
        raise SecretKeyInvalid(
            f"{path}: expected {KEY_BYTES} raw bytes or their base64 on one line "
            f"(create one with `head -c 32 /dev/urandom | base64 > FILE; chmod 600 FILE`)"
        )
    return key


def load_secret_box(path: str | os.PathLike[str]) -> SecretBox:
    """Read the key file at ``path``; raises SecretKeyMissing / SecretKeyInvalid."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise SecretKeyMissing(f"{p}: at-rest key file does not exist") from None
    except OSError as exc:
        raise SecretKeyInvalid(f"{p}: cannot read the at-rest key file ({exc.strerror})") from None
    return SecretBox(_parse_key_bytes(raw, p))


def box_from_env(environ: Mapping[str, str] | None = None) -> SecretBox:
    """The box of the file named by ``BKE_SECRET_KEY_FILE`` (the one place that variable is read)."""
    env = os.environ if environ is None else environ
    path = env.get(SECRET_KEY_ENV, "").strip()
    if not path:
        raise SecretKeyMissing(f"{SECRET_KEY_ENV} is not set; it must name a file holding the 32-byte at-rest key")
    return load_secret_box(path)


def create_key_file(path: str | os.PathLike[str]) -> SecretBox:
    """Create a new random key file, mode 0600, refusing to overwrite one (FileExistsError)."""
    p = Path(path)
    key = os.urandom(KEY_BYTES)
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(fd, 0o600)  # the umask may not take bits away from 0600, but be explicit
        os.write(fd, base64.b64encode(key) + b"\n")
    finally:
        os.close(fd)
    return SecretBox(key)
