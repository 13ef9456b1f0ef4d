"""A stored snapshot delivered to one member's node for a restore, sealed to that node's agent.

Why this way. The stored snapshot is sealed to the deployment's snapshot key, which only BKE's
services and the state's admin hold: a node agent must never get it (an agent holding it could
open every snapshot of every cluster). So the upgrader, which holds that key, opens the stored
stream piece by piece in memory and seals each piece again to the X25519 key BKE *provisioned*
for the receiving node's agent (bke.adapters.state.keys.certs.provisioned_agents_key, recorded by the operator
when the node was registered; never a key a message announced). Only that agent can open what
it receives; whoever else asks gets bytes they cannot open. What the bytes must be is in the
agent's signed command (`RestoreEtcdMember.sha256`), so the agent also knows the snapshot is the
one BKE meant, whoever answered. Nothing clear ever reaches the bus, Redis or a disk of the
upgrader (which keeps only the sealed stored object, in a private file, while a restore runs).

The agent asks for the pieces one by one (core NATS request/reply,
bke.contracts.restore.GetRestorePiece): each answer is one frame of a sealed stream
(bke.core.etcdsnap.sealed_stream) of `DELIVERY_PIECE` clear bytes, small enough for NATS's default
1 MiB payload once base64-encoded. The agent keeps the frames in a file (sealed, so harmless),
then opens them into the clear file it restores from, checking every frame's index and the
whole file's sha256 and etcd's own hash.

    service: Feed(make_frames).frame(index) -> (frame, last)     make_frames = resealed_frames(...)
    agent:   receive_frames(ask, sealed_path); open_received(sealed_path, opener, clear_path)
"""
from __future__ import annotations

import hashlib
import os
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey

from bke.core.errors import PermanentError
from .etcd_stream import check_etcd_hash
from bke.core.etcdsnap.sealed_stream import MAGIC, open_stream, seal_stream

__all__ = ["DELIVERY_PIECE", "DeliveryError", "Feed", "open_received", "receive_frames", "resealed_frames"]

DELIVERY_PIECE = 384 * 1024  # clear bytes per delivered frame: ~512 KiB of base64 on the bus
MAX_FRAMES = 1 << 22  # 1.5 TiB at DELIVERY_PIECE: a feed that never ends is refused


class DeliveryError(PermanentError):
    pass


def _reader(pieces: Iterator[bytes]) -> Callable[[int], bytes]:
    """A `read(n)` over an iterator of byte strings of any sizes."""
    buf = bytearray()

    def read(n: int) -> bytes:
        while len(buf) < n:
            piece = next(pieces, None)
            if piece is None:
                break
            buf.extend(piece)
        out = bytes(buf[:n])
        del buf[:n]
        return out

    return read


def resealed_frames(sealed_path: Path, opener: Callable[[bytes], bytes], recipient: X25519PublicKey,
                    piece: int = DELIVERY_PIECE) -> Iterator[bytes]:
    """The frames (magic left out) of the stored sealed stream at `sealed_path`, opened with
    `opener` and sealed again to `recipient` in pieces of `piece` clear bytes."""
    with open(sealed_path, "rb") as f:
        frames = seal_stream(_reader(open_stream(f.read, opener)), recipient, piece)
        next(frames)  # MAGIC: the agent writes its own
        yield from frames


class Feed:
    """One node's frames in order, one read ahead so that each answer says whether it is the
    last. The frame served last is kept, so a request retried after a lost reply costs nothing;
    a request for an earlier frame starts the stream again (sealing is randomised, but every
    frame opens to the same bytes, so frames of two passes mix safely)."""

    def __init__(self, make: Callable[[], Iterator[bytes]]) -> None:
        self.make = make
        self._restart()

    def _restart(self) -> None:
        self._it = self.make()
        self._next = 0
        self._ahead: bytes | None = next(self._it, None)
        self._served: tuple[int, bytes, bool] | None = None

    def frame(self, index: int) -> tuple[bytes, bool]:
        if self._served is not None and self._served[0] == index:
            return self._served[1], self._served[2]
        if index < self._next:
            self._restart()
        while True:
            if self._ahead is None:
                raise DeliveryError(f"the snapshot has no piece {index} (it has {self._next})")
            current, self._ahead = self._ahead, next(self._it, None)
            at, self._next = self._next, self._next + 1
            if at == index:
                self._served = (at, current, self._ahead is None)
                return current, self._ahead is None


def _private(path: Path) -> int:
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)


async def receive_frames(ask: Callable[[int], Awaitable[tuple[bytes, bool]]], sealed_path: Path) -> int:
    """Ask for frames 0, 1, ... until the last; write them as one sealed stream (0600). Returns
    the number of frames."""
    with os.fdopen(_private(sealed_path), "wb") as out:
        out.write(MAGIC)
        for index in range(MAX_FRAMES):
            frame, last = await ask(index)
            out.write(frame)
            if last:
                out.flush()
                os.fsync(out.fileno())
                return index + 1
    raise DeliveryError(f"the snapshot did not end within {MAX_FRAMES} pieces")


def open_received(sealed_path: Path, opener: Callable[[bytes], bytes], clear_path: Path, sha256: str) -> int:
    """Open the received stream into `clear_path` (0600) and check it: the sha256 BKE signed,
    then etcd's own trailing hash. Returns its size; on any mismatch the clear file is removed."""
    digest = hashlib.sha256()
    size = 0
    try:
        with open(sealed_path, "rb") as src, os.fdopen(_private(clear_path), "wb") as out:
            for piece in open_stream(src.read, opener):
                digest.update(piece)
                out.write(piece)
                size += len(piece)
            out.flush()
            os.fsync(out.fileno())
        if digest.hexdigest() != sha256:
            raise DeliveryError(f"the delivered snapshot's sha256 {digest.hexdigest()[:16]}... is not the "
                                f"{sha256[:16]}... this command names; it is not restored")
        check_etcd_hash(clear_path)
    except BaseException:
        clear_path.unlink(missing_ok=True)
        raise
    return size
