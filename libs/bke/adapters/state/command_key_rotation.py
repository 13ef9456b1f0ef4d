"""The stored side of a command-signing key rollover (bke.core.secrets.command_key_rollover), as
the state's admin runs it (`bke keys command-key ...`):

    bke:command-signing-key        the current key, sealed (the signers read it: command_signing)
    bke:command-signing-key:next   the next key, sealed the same way (same AAD: the switch moves
                                   its bytes, never decrypts them twice)
    bke:command-key-rollover       the rollover record, public values only
    bke:command-key-rollover:acks  "<cluster>/<node>" -> the key id its agent took (the dispatcher
                                   writes it from the announcement's result: bke_dispatcher.command_key)

Each step is idempotent and atomic (WATCH/MULTI): `start` twice is refused while one is in
progress; `switch` of a rollover that switched already reports it; a concurrent second switch
sees the record changed and reads again. No private key leaves the sealed blobs: the record
holds the next key's public line, and the CLI prints fingerprints.

Errors::

    PermanentError
     └─ RolloverError (bke.core.secrets.command_key_rollover)   no rollover / one already / not switched
"""
from __future__ import annotations

from datetime import datetime, timedelta

from redis.asyncio import Redis
from redis.exceptions import WatchError

from bke.core.errors import TemporaryError
from bke.core.secrets import SecretBox
from bke.core.secrets.command_key_rollover import Rollover, RolloverError
from bke.core.secrets.signing import CommandSigner

from .keys.dispatcher import accepted_agents_key, command_key_acks_key, installs_index
from .keys.trust import command_key_rollover_key, command_signing_key, command_signing_next_key

__all__ = ["acknowledgements", "finish_rollover", "read_rollover", "start_rollover", "switch_rollover"]

ATTEMPTS = 5


def _raw(value: bytes | str | None) -> bytes | None:
    """A stored value as bytes (a client that decodes responses gives str)."""
    return value.encode() if isinstance(value, str) else value


async def read_rollover(redis: Redis) -> Rollover | None:
    raw = _raw(await redis.get(command_key_rollover_key()))
    return None if raw is None else Rollover.from_json(raw)


async def start_rollover(redis: Redis, box: SecretBox, overlap_s: float, now: datetime) -> Rollover:
    """A next key, sealed beside the current one, and the record; RolloverError while another is
    in progress or when there is no current key (`bke state init` makes it)."""
    blob = _raw(await redis.get(command_signing_key()))
    if blob is None:
        raise RolloverError("no command-signing key is stored yet: there is nothing to roll over")
    current = CommandSigner.from_store(blob, box)  # the key file must open it: a wrong one fails here
    nxt = CommandSigner.generate()
    rollover = Rollover(nxt.verify_key.public_line, nxt.key_id, current.key_id,
                        now + timedelta(seconds=overlap_s), now)
    async with redis.pipeline(transaction=True) as pipe:
        await pipe.watch(command_key_rollover_key(), command_signing_key())
        if await pipe.exists(command_key_rollover_key()):
            held = Rollover.from_json(_raw(await pipe.get(command_key_rollover_key())) or b"")
            raise RolloverError(f"a rollover to key {held.next_key_id} is in progress ({held.stage}) since "
                                f"{held.started_at.isoformat()}: finish it first")
        if _raw(await pipe.get(command_signing_key())) != blob:
            raise TemporaryError("the command-signing key changed while the rollover started: start it again",
                                 delay=1.0)
        pipe.multi()
        pipe.set(command_signing_next_key(), nxt.seal_for_store(box))
        pipe.set(command_key_rollover_key(), rollover.to_json())
        pipe.delete(command_key_acks_key())  # a former rollover's
        try:
            await pipe.execute()
        except WatchError:
            raise TemporaryError("a rollover started meanwhile: look at `bke keys command-key status`",
                                 delay=1.0) from None
    return rollover


async def switch_rollover(redis: Redis, box: SecretBox, now: datetime) -> Rollover:
    """The next key becomes the current one (the signers follow within RELOAD_S). Checked to open
    with `box` and to be the key the record announced before anything changes."""
    for _ in range(ATTEMPTS):
        async with redis.pipeline(transaction=True) as pipe:
            await pipe.watch(command_key_rollover_key(), command_signing_next_key())
            raw = _raw(await pipe.get(command_key_rollover_key()))
            if raw is None:
                raise RolloverError("no command-key rollover in progress: `bke keys command-key start` first")
            rollover = Rollover.from_json(raw)
            if rollover.switched_at is not None:
                return rollover  # switched already: the same answer again
            blob = _raw(await pipe.get(command_signing_next_key()))
            if blob is None:
                raise RolloverError(f"the next key of the rollover ({command_signing_next_key()}) is missing")
            if CommandSigner.from_store(blob, box).key_id != rollover.next_key_id:
                raise RolloverError(f"the stored next key is not {rollover.next_key_id}, the one announced")
            done = rollover.switched(now)
            pipe.multi()
            pipe.set(command_signing_key(), blob)
            pipe.delete(command_signing_next_key())
            pipe.set(command_key_rollover_key(), done.to_json())
            try:
                await pipe.execute()
            except WatchError:
                continue  # another switch or a re-encryption meanwhile: read again
            return done
    raise TemporaryError("the rollover record kept changing during the switch: run it again", delay=1.0)


async def finish_rollover(redis: Redis) -> Rollover:
    """The record goes once switched (the old key is no longer stored anywhere); RolloverError
    before the switch."""
    rollover = await read_rollover(redis)
    if rollover is None:
        raise RolloverError("no command-key rollover in progress")
    if rollover.switched_at is None:
        raise RolloverError(f"the rollover to {rollover.next_key_id} has not switched yet: "
                            "`bke keys command-key switch` first")
    await redis.delete(command_key_rollover_key(), command_key_acks_key())
    return rollover


def _text(v: object) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


async def acknowledgements(redis: Redis, rollover: Rollover) -> tuple[list[str], list[str]]:
    """("<cluster>/<node>" of the accepted agents that took the next key, of those that did not)."""
    acks = {_text(k): _text(v) for k, v in (await redis.hgetall(command_key_acks_key())).items()}
    took: list[str] = []
    missing: list[str] = []
    for cluster in sorted(_text(c) for c in await redis.smembers(installs_index())):
        for node in sorted(_text(n) for n in await redis.hkeys(accepted_agents_key(cluster))):
            name = f"{cluster}/{node}"
            (took if acks.get(name) == rollover.next_key_id else missing).append(name)
    return took, missing
