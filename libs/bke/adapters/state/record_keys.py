"""The record writers' signing keys in Redis (bke.core.secrets.record_signing).

    bke:plan-signing-key    the planner's and the upgrader's key (at-rest kind `plan`)
    bke:render-signing-key  the renderer's key (at-rest kind `render`)

Made by the admin side (`bke state init`, the lab's runtime: `ensure_record_keys_sync`), read
by everyone: a reader takes the public half in clear from the same GET that brings the record
(`public_read`), a writer decrypts the private half with its kind's key file once and keeps it.
Why the admin makes them: a writer that made its own would also write the public half every
reader trusts, and so could every holder of its Redis password. A service's Redis user only
reads them (bke.adapters.runtime.redis_acl).

A writer given an admin client (tests, the lab's tools) makes the key it finds missing, with
`SET NX` as the command-signing key is made: a service's user is refused that write, and the
refusal says to run `bke state init`.
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import NoPermissionError

from bke.core.secrets import SecretBox, SecretKeyMissing, keyring_for
from bke.core.secrets.record_signing import WRITERS, RecordKeyError, RecordSigner, RecordVerifier
from .keys.trust import record_signing_key

__all__ = ["RecordKeys", "ensure_record_keys_sync", "verifier_of"]


def verifier_of(writer: str, blob: Any, record: str) -> RecordVerifier:
    """The writer's public half from its stored key (`blob`, read beside `record`)."""
    if blob is None:
        raise RecordKeyError(f"{record}: no {writer}-signing key is stored (`bke state init` makes it), so its "
                             "signature cannot be checked; it is not used")
    return RecordVerifier.from_stored(writer, blob)


class RecordKeys:
    """A process's record-signing keys: the private halves of the writers it is (`boxes`:
    writer -> its at-rest keys, read at each use; a writer not named there: its kind's key file
    if this process is given one, BKE_KEY_FILE_<KIND>), the public halves of all."""

    def __init__(self, redis: Redis, boxes: Mapping[str, Callable[[], SecretBox]] | None = None) -> None:
        self.redis, self.boxes = redis, dict(boxes or {})
        self._signers: dict[str, RecordSigner] = {}
        self._lock = asyncio.Lock()

    async def signer(self, writer: str) -> RecordSigner:
        """The writer's private half, read once (a new one made only by an admin client)."""
        if writer not in self._signers:
            if writer not in self.boxes:
                try:
                    self.boxes[writer] = keyring_for(writer).box
                except SecretKeyMissing:
                    raise RecordKeyError(f"this process is not given the `{writer}` key file (BKE_KEY_FILE_"
                                         f"{writer.upper()}): it cannot sign what the {writer} writer stores") from None
            async with self._lock:
                if writer not in self._signers:
                    self._signers[writer] = await self._load(writer, self.boxes[writer]())
        return self._signers[writer]

    async def _load(self, writer: str, box: SecretBox) -> RecordSigner:
        name = record_signing_key(writer)
        blob = await self.redis.get(name)
        if blob is None:
            try:
                await self.redis.set(name, RecordSigner.generate(writer).seal_for_store(box), nx=True)
            except NoPermissionError:
                raise RecordKeyError(f"no {writer}-signing key is stored and this service may not make one: "
                                     "run `bke state init` with its key file") from None
            blob = await self.redis.get(name)
        if blob is None:  # deleted between the two reads: by the admin, who may make it again
            raise RecordKeyError(f"the {writer}-signing key went while it was being made: try again")
        return RecordSigner.from_store(writer, blob, box)

    async def verifier(self, writer: str) -> RecordVerifier:
        """The writer's public half, read now (readers that read it with their record use
        `verifier_of` on the same pipeline instead)."""
        return verifier_of(writer, await self.redis.get(record_signing_key(writer)), record_signing_key(writer))


def ensure_record_keys_sync(redis: Any, boxes: Mapping[str, SecretBox]) -> dict[str, tuple[RecordSigner, bool]]:
    """`bke state init`'s part: each writer's key whose at-rest key is given, made if missing
    (`SET NX`: a second init keeps the first). writer -> (its key, made now)."""
    done: dict[str, tuple[RecordSigner, bool]] = {}
    for writer, box in boxes.items():
        if writer not in WRITERS:
            raise ValueError(f"unknown record writer {writer!r}")
        made = bool(redis.set(record_signing_key(writer), RecordSigner.generate(writer).seal_for_store(box), nx=True))
        done[writer] = (RecordSigner.from_store(writer, redis.get(record_signing_key(writer)), box), made)
    return done
