"""A large file sealed piece by piece, so that neither side holds it whole in memory.

`bke.core.secrets.sealing.seal` seals one message; an etcd snapshot may be gigabytes. The file is
cut into pieces of `PIECE` bytes, each sealed on its own to the same recipient; each piece's
clear text starts with its index and a last-piece flag, so a dropped, repeated, reordered or
truncated piece is an error when the stream is opened, not a silently shorter file. (Sealing
gives confidentiality, not authorship: anyone with the public key can seal. What a snapshot is
is checked after opening: its sha256 and etcd's own trailing hash.)

    stream := MAGIC frame*
    frame  := u32 big-endian length | sealed blob
    clear  := u64 big-endian index | u8 last (0/1) | piece bytes

Errors: `SealedStreamError` (permanent) for any malformed stream; the sealing errors of
bke.core.secrets.sealing for a blob sealed to another key or altered.
"""
from __future__ import annotations

import struct
from collections.abc import Callable, Iterator

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey

from bke.core.errors import PermanentError
from bke.core.secrets.sealing import seal

__all__ = ["MAGIC", "PIECE", "SealedStreamError", "open_stream", "seal_stream"]

MAGIC = b"BKESNAP1"
PIECE = 4 << 20  # clear bytes per sealed piece
_LEN = struct.Struct(">I")
_HEAD = struct.Struct(">QB")
_MAX_FRAME = PIECE + 1024  # a piece plus the sealing header and tag, with room


class SealedStreamError(PermanentError):
    pass


def seal_stream(read: Callable[[int], bytes], recipient: X25519PublicKey, piece: int = PIECE) -> Iterator[bytes]:
    """Yield the sealed stream of what `read(n)` returns until it returns b""."""
    yield MAGIC
    index = 0
    current = read(piece)
    while True:
        following = read(piece) if current else b""
        last = not following
        blob = seal(recipient, _HEAD.pack(index, 1 if last else 0) + current)
        yield _LEN.pack(len(blob)) + blob
        if last:
            return
        index, current = index + 1, following


def _exactly(read: Callable[[int], bytes], n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = read(n - len(out))
        if not chunk:
            break
        out += chunk
    return bytes(out)


def open_stream(read: Callable[[int], bytes], opener: Callable[[bytes], bytes]) -> Iterator[bytes]:
    """Yield the clear pieces of a sealed stream; `opener` opens one sealed blob."""
    if _exactly(read, len(MAGIC)) != MAGIC:
        raise SealedStreamError("not a BKE sealed snapshot stream (bad magic)")
    index = 0
    while True:
        head = _exactly(read, _LEN.size)
        if len(head) != _LEN.size:
            raise SealedStreamError(f"the sealed stream ends after piece {index - 1} without its last piece")
        (length,) = _LEN.unpack(head)
        if length > _MAX_FRAME:
            raise SealedStreamError(f"piece {index}: a sealed piece of {length} bytes is larger than any BKE writes")
        blob = _exactly(read, length)
        if len(blob) != length:
            raise SealedStreamError(f"piece {index} is cut short")
        clear = opener(blob)
        got, last = _HEAD.unpack_from(clear)
        if got != index:
            raise SealedStreamError(f"piece {got} found where piece {index} was expected")
        yield clear[_HEAD.size:]
        if last:
            if read(1):
                raise SealedStreamError("bytes follow the last piece of the sealed stream")
            return
        index += 1
