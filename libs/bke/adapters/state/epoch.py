"""The state's epoch: how a running service notices that Redis lost (or was given) its state.

Why: a Redis emptied under a running install (FLUSHALL, a volume lost, a replica promoted
without the data) used to go unnoticed. The dispatcher waited for records that no longer
existed, and a re-run started from zero with a new CA while the nodes kept the old one.

`bke:epoch` holds a random id. Only the admin side writes it: `bke state init` for a new
deployment (`ensure_epoch`, SET NX: a second init keeps the first id), the lab's runtime when it
starts (bke.adapters.runtime.embedded, the same SET NX), and `bke state restore` (`write_epoch`, the
backup's id). Services may only read it (their Redis users, bke.adapters.runtime.redis_acl): a service
that could write it could also delete it and halt every other service as "state lost".

Every service remembers the id it started with, and an `EpochWatch` reads the key again every
`interval_s` seconds (one GET). If the key is gone or holds another id, the state was lost or
replaced. The watch then stops the service from acting: `ensure_intact()`, which is called
before each message is handled, raises `StateLost`, a TemporaryError. The message stays in its
stream and is handled after a restore. The service's `on_lost` hook reports the loss. Once
`bke state restore` writes the remembered id back, the watch calls `on_restored` and the
service goes on.

A service that *starts* on a store without an epoch cannot tell a new deployment from a lost
one, and no longer guesses: it waits, not ready (`StateNotInitialised`, the `state` readiness
condition says why), with every message held in its stream, until a person runs `bke state
init` (new) or `bke state restore FILE` (lost). It adopts the epoch at the next check after
that. Against nodes that already hold a CA, the certs service's CA guard still refuses to seal
another CA (the agents report their CA's fingerprint), so an init on a lost store gives no node
a second CA.

Errors::

    TemporaryError
     ├─ StateLost             the store's epoch is not the one this process started with
     └─ StateNotInitialised   the store has no epoch yet: `bke state init` (or a restore)
"""
from __future__ import annotations

import logging
import secrets
from typing import Any, Awaitable, Callable, Protocol

from redis.asyncio import Redis
from redis.exceptions import RedisError

from bke.core.errors import TemporaryError
from bke.adapters.periodic import Periodic
from .keys.common import epoch_key

__all__ = ["NOT_INITIALISED", "STATE_LOST", "EpochWatch", "StateLost", "StateNotInitialised", "ensure_epoch",
           "ensure_epoch_sync", "new_epoch", "read_epoch", "watch_epoch", "write_epoch"]

log = logging.getLogger(__name__)

STATE_LOST = "state lost: restore with `bke state restore`"
NOT_INITIALISED = ("state not initialised: the store has no epoch; run `bke state init` (a new deployment) "
                   "or `bke state restore FILE` (a lost one)")


class StateLost(TemporaryError):
    """The state this process worked on is gone; wait for a restore, do not start over."""

    def __init__(self, detail: str = "", delay: float = 5.0) -> None:
        super().__init__(f"{STATE_LOST}" + (f" ({detail})" if detail else ""), delay=delay)


class StateNotInitialised(TemporaryError):
    """No epoch in the store yet: wait (messages stay in their streams) for `bke state init`."""

    def __init__(self, delay: float = 5.0) -> None:
        super().__init__(NOT_INITIALISED, delay=delay)


def new_epoch() -> str:
    return secrets.token_hex(16)


def _s(v: bytes | str | None) -> str | None:
    return v.decode() if isinstance(v, bytes) else v


async def read_epoch(redis: Redis) -> str | None:
    return _s(await redis.get(epoch_key()))


async def ensure_epoch(redis: Redis, candidate: str) -> str:
    """The epoch in force: `candidate` if the store had none (SET NX), else the stored one.
    The admin side's (`bke state init`); a service's user may not write the key."""
    await redis.set(epoch_key(), candidate, nx=True)
    epoch = await read_epoch(redis)
    if epoch is None:  # deleted between the two calls: the store is being emptied right now
        raise StateLost("the epoch vanished while it was being written")
    return epoch


class SyncStore(Protocol):
    """What `ensure_epoch_sync` needs of a blocking Redis client."""

    def get(self, name: str) -> Any: ...
    def set(self, name: str, value: str, *, nx: bool = ...) -> Any: ...


def ensure_epoch_sync(redis: SyncStore, candidate: str) -> str:
    """`ensure_epoch` for synchronous callers (the lab's runtime, the CLI)."""
    redis.set(epoch_key(), candidate, nx=True)
    epoch = _s(redis.get(epoch_key()))
    if epoch is None:
        raise StateLost("the epoch vanished while it was being written")
    return epoch


async def write_epoch(redis: Redis, epoch: str) -> None:
    """Set the epoch unconditionally: only `bke state restore` does this."""
    await redis.set(epoch_key(), epoch)


Hook = Callable[[str], Awaitable[None]]


async def _nothing(_: str) -> None:
    return None


class EpochWatch:
    """Adopts the store's epoch at `start()`, re-reads it on a timer, and reports the transitions.

    `on_waiting(reason)` runs once when the store has no epoch to adopt (no `bke state init`
    yet), `on_adopted(epoch)` when one is adopted. `on_lost(detail)` runs once when the state is
    found lost, and `on_restored(epoch)` runs once when the remembered epoch is back.
    `on_intact(epoch)` runs after each check that finds the state intact, so that a service can
    note what it would have to report if the state were lost. A Redis that does not answer is an
    outage, not a loss: the last verdict stands until Redis answers again.
    """

    def __init__(self, redis: Redis, *, interval_s: float = 1.0, service: str = "",
                 on_lost: Hook = _nothing, on_restored: Hook = _nothing, on_intact: Hook = _nothing,
                 on_waiting: Hook = _nothing, on_adopted: Hook = _nothing) -> None:
        self.redis, self.service = redis, service
        self.on_lost, self.on_restored, self.on_intact = on_lost, on_restored, on_intact
        self.on_waiting, self.on_adopted = on_waiting, on_adopted
        self.epoch: str | None = None
        self.waiting = False  # the store had no epoch at the last look, and none was adopted yet
        self.lost_detail = ""
        self._reported = True
        self._periodic = Periodic(f"epoch-watch:{service}", interval_s, self.check, log)

    @property
    def lost(self) -> bool:
        return bool(self.lost_detail)

    async def start(self) -> str:
        """Adopt the store's epoch and start watching it. A store without one, or a Redis away
        (the service waits, not ready), leaves the epoch to the first check that finds one. ""
        until then."""
        try:
            await self._adopt()
        except (RedisError, OSError) as exc:
            log.warning("state epoch not read yet: redis unavailable (%s); adopted once it answers",
                        type(exc).__name__, extra={"service": self.service})
        self._periodic.start()
        return self.epoch or ""

    async def _adopt(self) -> None:
        epoch = await read_epoch(self.redis)
        if epoch is None:  # never written by the admin side, or emptied before this process looked
            if not self.waiting:
                self.waiting = True
                log.error("%s", NOT_INITIALISED, extra={"service": self.service})
                await self.on_waiting(NOT_INITIALISED)
            return
        self.epoch, self.waiting = epoch, False
        log.info("state epoch %s", epoch, extra={"service": self.service})
        await self.on_adopted(epoch)

    async def stop(self) -> None:
        await self._periodic.stop()

    def ensure_intact(self) -> None:
        """Raise StateLost while the state is lost, StateNotInitialised while the store has no
        epoch to adopt. No I/O: call it before every message."""
        if self.lost_detail:
            raise StateLost(self.lost_detail)
        if self.waiting:
            raise StateNotInitialised()

    async def check(self) -> bool:
        """Read the epoch once and act on a change. Returns True if the state is intact."""
        if self.epoch is None:  # not started, started while Redis was away, or no epoch stored yet
            try:
                await self._adopt()
            except (RedisError, OSError):
                pass
            return not self.waiting
        try:
            current = await read_epoch(self.redis)
        except (RedisError, OSError) as exc:
            log.info("epoch check skipped: redis unavailable (%s)", type(exc).__name__)
            return not self.lost
        if current == self.epoch:
            if self.lost_detail:
                self.lost_detail = ""
                log.warning("state restored (epoch %s): going on", current, extra={"service": self.service})
                await self.on_restored(current)
            await self.on_intact(current)
            return True
        detail = ("the store has no epoch: it was emptied" if current is None
                  else f"the store's epoch is {current}, this service started with {self.epoch}")
        if not self.lost_detail:
            self.lost_detail = detail
            self._reported = False
            log.error("%s: %s", STATE_LOST, detail, extra={"service": self.service})
        if not self._reported:  # a report that failed (NATS away) is tried again next round
            await self.on_lost(self.lost_detail)
            self._reported = True
        return False


class _Readiness(Protocol):
    def set(self, condition: str, ok: bool, why: str = "") -> None: ...


class _ServiceHooks(Protocol):
    """The part of bke.adapters.bus.service.Service that a watch hooks into."""

    name: str
    guards: list[Callable[[], None]]
    after_start: list[Callable[[], Awaitable[None]]]
    before_stop: list[Callable[[], Awaitable[None]]]

    @property
    def readiness(self) -> _Readiness: ...  # read only: a Service's own Readiness fits


def watch_epoch(svc: _ServiceHooks, redis: Redis, *, interval_s: float = 1.0, on_lost: Hook = _nothing,
                on_restored: Hook = _nothing, on_intact: Hook = _nothing) -> EpochWatch:
    """A watch for a service: every message waits while the state is lost or not initialised
    (its guard), the `state` readiness condition says why, and the epoch is adopted before the
    subscribers start (the first of `after_start`)."""
    async def waiting(reason: str) -> None:
        svc.readiness.set("state", False, reason)

    async def adopted(_: str) -> None:
        svc.readiness.set("state", True)

    async def lost(detail: str) -> None:
        svc.readiness.set("state", False, f"{STATE_LOST} ({detail})")  # the health request says so too
        await on_lost(detail)

    async def restored(epoch: str) -> None:
        svc.readiness.set("state", True)
        await on_restored(epoch)

    watch = EpochWatch(redis, interval_s=interval_s, service=svc.name, on_lost=lost,
                       on_restored=restored, on_intact=on_intact, on_waiting=waiting, on_adopted=adopted)
    svc.guards.append(watch.ensure_intact)

    async def start() -> None:
        await watch.start()

    svc.after_start.insert(0, start)
    svc.before_stop.append(watch.stop)
    return watch
