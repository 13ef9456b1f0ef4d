"""Encryption at rest for the private keys the services keep (AES-256-GCM), with keyrings.

Why: CA keys and every other private key BKE stores (in Redis, or under ``DIR/.bke`` for the
offline ``bke certs issue``) must be useless to whoever reads the store alone. The operator
provides the keys in files (one per job: bke.core.secrets.key_kinds says which file each process
reads); the store keeps ciphertext.

Blob format (version 1)::

    b"BKEAR1" | key id (8 bytes) | nonce (12 bytes) | AES-256-GCM ciphertext + tag

The key id (a hash of the key, not the key) is in the blob, so that a box holding several keys
picks the one that opens it, a rotation finds what is still under an old key (`blob_key_id`),
and decrypting with another key says "wrong key" instead of "corrupt". Callers bind each blob to
where it belongs with ``aad`` (e.g. ``b"<cluster>/<instance>"``), so a blob copied to another
record does not decrypt.

Key file (a keyring): 32 raw bytes, or their base64 on one line (what :func:`create_key_file`
writes): one key, which encrypts and decrypts. Or, as `bke keys` writes it, one key per line
with its role::

    # comments and blank lines are ignored
    current <base64>    exactly one: encrypts new blobs (and decrypts)
    next <base64>       at most one, staged by `bke keys add`: decrypts; `rotate` makes it current
    previous <base64>   any number: decrypt what is not re-encrypted yet; `retire` drops them

Why roles and not an order: a rotation with files that reach the processes one by one needs a
key every process decrypts with before any process encrypts with it (`next`), and the old key
kept until nothing is under it (`previous`); an order alone cannot tell the two apart.

Errors (all permanent: retrying cannot fix a key file)::

    PermanentError
     ├─ SecretKeyError
     │   ├─ SecretKeyMissing   no key file named, or the file does not exist
     │   └─ SecretKeyInvalid   unreadable, not 32 bytes (raw or base64), or a malformed keyring
     └─ DecryptError           wrong key, wrong record (aad), or corrupt blob
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from bke.core.errors import PermanentError

__all__ = [
    "SECRET_KEY_ENV",
    "DecryptError",
    "Keyring",
    "SecretBox",
    "SecretKeyError",
    "SecretKeyInvalid",
    "SecretKeyMissing",
    "blob_key_id",
    "create_key_file",
    "load_keyring",
    "load_secret_box",
    "new_key",
    "parse_keyring",
    "write_keyring",
]

SECRET_KEY_ENV = "BKE_SECRET_KEY_FILE"  # the one file for every kind (bke.core.secrets.key_kinds)
KEY_BYTES = 32
_MAGIC = b"BKEAR1"
_KID = 8
_NONCE = 12
_HEADER = len(_MAGIC) + _KID + _NONCE
ROLES = ("current", "next", "previous")


class SecretKeyError(PermanentError):
    """The at-rest key cannot be used; the message names the file, never its content."""


class SecretKeyMissing(SecretKeyError):
    pass


class SecretKeyInvalid(SecretKeyError):
    pass


class DecryptError(PermanentError):
    pass


def _key_id(key: bytes) -> bytes:
    return hashlib.sha256(b"bke-at-rest-key-id\0" + key).digest()[:_KID]


def new_key() -> bytes:
    return os.urandom(KEY_BYTES)


def blob_key_id(blob: bytes) -> str | None:
    """The id of the key a blob was encrypted with (None: not an at-rest blob)."""
    if len(blob) < _HEADER + 16 or not blob.startswith(_MAGIC):
        return None
    return blob[len(_MAGIC):len(_MAGIC) + _KID].hex()


class SecretBox:
    """AES-256-GCM with a keyring: `key` encrypts, it and every `decrypt_only` key decrypt.
    ``repr`` shows only key ids."""

    __slots__ = ("_aead", "_kid", "_ring")

    def __init__(self, key: bytes, decrypt_only: Sequence[bytes] = ()) -> None:
        ring: dict[bytes, AESGCM] = {}
        for k in (key, *decrypt_only):
            if len(k) != KEY_BYTES:
                raise SecretKeyInvalid(f"an at-rest key must be {KEY_BYTES} bytes, got {len(k)}")
            ring.setdefault(_key_id(k), AESGCM(k))
        self._kid = _key_id(key)
        self._aead = ring[self._kid]
        self._ring = ring

    @property
    def key_id(self) -> str:
        """The encrypting key's fingerprint, safe to log (it reveals nothing about the key)."""
        return self._kid.hex()

    @property
    def key_ids(self) -> tuple[str, ...]:
        """Every key's fingerprint, the encrypting one first."""
        return tuple(k.hex() for k in self._ring)

    def __repr__(self) -> str:
        others = [k for k in self.key_ids if k != self.key_id]
        return f"SecretBox(key_id={self.key_id})" if not others else \
            f"SecretBox(key_id={self.key_id}, decrypts={','.join(others)})"

    def __reduce__(self) -> NoReturn:
        raise TypeError("SecretBox is not picklable: the key must not leave this process")

    def encrypt(self, plaintext: bytes, aad: bytes = b"") -> bytes:
        """Encrypt with a fresh random nonce (so the same plaintext gives different bytes)."""
        nonce = os.urandom(_NONCE)
        return _MAGIC + self._kid + nonce + self._aead.encrypt(nonce, plaintext, _MAGIC + self._kid + aad)

    def decrypt(self, blob: bytes, aad: bytes = b"") -> bytes:
        """Inverse of :meth:`encrypt`, with whichever key of the ring made `blob`; ``aad`` must
        be the one given at encryption."""
        if len(blob) < _HEADER + 16 or not blob.startswith(_MAGIC):
            raise DecryptError("not a BKE at-rest blob (bad header or too short)")
        kid = blob[len(_MAGIC):len(_MAGIC) + _KID]
        aead = self._ring.get(kid)
        if aead is None:
            others = [k for k in self.key_ids if k != self.key_id]
            also = f" (and {', '.join(others)} to decrypt)" if others else ""
            raise DecryptError(f"encrypted with key {kid.hex()}, but the configured key is {self.key_id}{also}")
        nonce = blob[len(_MAGIC) + _KID:_HEADER]
        try:
            return aead.decrypt(nonce, blob[_HEADER:], _MAGIC + kid + aad)
        except InvalidTag:
            raise DecryptError("authentication failed: corrupt blob or blob of another record") from None

    def reencrypt(self, blob: bytes, aad: bytes = b"") -> bytes | None:
        """`blob` under the encrypting key, or None when it is under that key already (a
        rotation rewrites only what it must)."""
        if blob_key_id(blob) == self.key_id:
            return None
        return self.encrypt(self.decrypt(blob, aad), aad)


@dataclass(frozen=True)
class Keyring:
    """A key file's keys by role (see the module docstring). Pure: `bke keys` computes the next
    keyring with these methods and writes it with :func:`write_keyring`."""

    current: bytes
    next: bytes | None = None
    previous: tuple[bytes, ...] = ()

    def __repr__(self) -> str:  # never the keys
        return f"Keyring({', '.join(f'{role}={kid}' for role, kid in self.key_ids)})"

    @property
    def key_ids(self) -> list[tuple[str, str]]:
        """(role, key id) of every key, in the file's order."""
        keys = [("current", self.current), *([("next", self.next)] if self.next else []),
                *(("previous", k) for k in self.previous)]
        return [(role, _key_id(k).hex()) for role, k in keys]

    def box(self) -> SecretBox:
        return SecretBox(self.current, [*([self.next] if self.next else []), *self.previous])

    def staged(self, key: bytes) -> Keyring:
        """`key` added as `next`: it decrypts from now on, and encrypts once rotated to."""
        if self.next is not None:
            raise ValueError("a key is staged already (rotate to it, or edit the file)")
        return Keyring(self.current, key, self.previous)

    def rotated(self, key: bytes) -> Keyring:
        """The staged key (else `key`) becomes current; the current one is kept as previous."""
        return Keyring(self.next or key, None, (self.current, *self.previous))

    def retired(self) -> Keyring:
        """Without the previous keys (once nothing is encrypted with them)."""
        return Keyring(self.current, self.next, ())


def _b64_key(text: bytes) -> bytes | None:
    try:
        key = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None
    return key if len(key) == KEY_BYTES else None


def parse_keyring(raw: bytes, path: str | os.PathLike[str] = "key file") -> Keyring:
    """A key file's bytes as a Keyring; SecretKeyInvalid names the file and line, never a key."""
    if len(raw) == KEY_BYTES:
        return Keyring(raw)
    lines = [(n, ln.strip()) for n, ln in enumerate(raw.splitlines(), 1)]
    lines = [(n, ln) for n, ln in lines if ln and not ln.startswith(b"#")]
    if len(lines) == 1 and b" " not in lines[0][1]:
        key = _b64_key(lines[0][1])
        if key is None:
            raise SecretKeyInvalid(
                f"{path}: expected {KEY_BYTES} raw bytes or their base64 on one line "
                f"(create one with `head -c 32 /dev/urandom | base64 > FILE; chmod 600 FILE`)")
        return Keyring(key)
    found: dict[str, list[bytes]] = {role: [] for role in ROLES}
    for n, line in lines:
        role, _, text = line.partition(b" ")
        key = _b64_key(text.strip())
        if role.decode(errors="replace") not in ROLES or key is None:
            raise SecretKeyInvalid(f"{path}, line {n}: expected '<current|next|previous> <base64 of {KEY_BYTES} bytes>'")
        found[role.decode()].append(key)
    if len(found["current"]) != 1 or len(found["next"]) > 1:
        raise SecretKeyInvalid(f"{path}: a keyring has exactly one 'current' key and at most one 'next' "
                               f"(found {len(found['current'])} and {len(found['next'])})")
    return Keyring(found["current"][0], found["next"][0] if found["next"] else None, tuple(found["previous"]))


def load_keyring(path: str | os.PathLike[str]) -> Keyring:
    """Read the key file at ``path``; raises SecretKeyMissing / SecretKeyInvalid."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise SecretKeyMissing(f"{p}: at-rest key file does not exist") from None
    except OSError as exc:
        raise SecretKeyInvalid(f"{p}: cannot read the at-rest key file ({exc.strerror})") from None
    return parse_keyring(raw, p)


def load_secret_box(path: str | os.PathLike[str]) -> SecretBox:
    """The box of the key file at ``path`` (every key of its keyring)."""
    return load_keyring(path).box()


def write_keyring(path: str | os.PathLike[str], ring: Keyring, what: str = "") -> None:
    """Write `ring` to `path` (0600) through a new file renamed over it: a process reading the
    file at any moment sees the old keyring or the new one, never a part."""
    p = Path(path)
    head = f"# BKE at-rest keyring{' for ' + what if what else ''}: 'current' encrypts, every key decrypts (bke keys)\n"
    body = head + "".join(f"{role} {base64.b64encode(key).decode()}\n"
                          for role, key in [("current", ring.current), *([("next", ring.next)] if ring.next else []),
                                            *(("previous", k) for k in ring.previous)])
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, body.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, p)


def create_key_file(path: str | os.PathLike[str]) -> SecretBox:
    """Create a new random key file, mode 0600, refusing to overwrite one (FileExistsError)."""
    p = Path(path)
    key = new_key()
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(fd, 0o600)  # the umask may not take bits away from 0600, but be explicit
        os.write(fd, base64.b64encode(key) + b"\n")
    finally:
        os.close(fd)
    return SecretBox(key)
