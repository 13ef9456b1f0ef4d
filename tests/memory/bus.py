"""The in-memory bus: the part of a nats-py connection that BKE's services and agents use, over
one in-process router instead of a NATS server.

What is kept of NATS's behaviour, because the services' code relies on it:
- subjects and filters with `*` (one token) and `>` (the rest), as nats-server matches them;
- core publish/subscribe, queue groups (one member answers), request/reply on an `_INBOX.`
  subject, and NoRespondersError when nobody listens (nats-py's answer with headers on);
- every message published on a stream's subject is stored by that stream, once per
  `Nats-Msg-Id` (JetStream's de-duplication), whether it was a core or a JetStream publish
  (jetstream.py holds the streams, their consumers and the object store).

What is not: clustering, permissions, payload limits, ack waits (a message is redelivered only
when nacked), flow control. The faults and security tiers keep those on a real server.

Every message is recorded (`Router.log`) for assertions, and `Router.wait_for` wakes on each
publish: tests wait on what the services say, never on time.
"""
from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

# NATS wildcards as nats-server matches them: `*` one token, `>` the rest
from bke.adapters.auth.creds import subject_matches

__all__ = ["CoreMsg", "MemoryNats", "Recorded", "Router", "WAIT_S", "subject_matches"]

# A deadline, not a pause: a wait returns as soon as its message is published. Generous because
# a shared 2-core machine under load runs the same flow several times slower.
WAIT_S = 180.0


@dataclass(frozen=True)
class Recorded:
    """One message as it was published."""

    subject: str
    data: bytes
    headers: dict[str, str]


@dataclass
class CoreMsg:
    """A core message as a subscriber's callback sees it (nats-py's Msg, the part BKE reads)."""

    subject: str
    data: bytes
    reply: str = ""
    headers: dict[str, str] | None = None
    _nc: Any = None

    async def respond(self, data: bytes) -> None:
        await self._nc.publish(self.reply, data)


@dataclass
class _CoreSub:
    subject: str
    queue: str
    cb: Callable[[CoreMsg], Any]
    router: Router
    inbox: asyncio.Queue[CoreMsg] = field(default_factory=asyncio.Queue)
    task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.create_task(self._run(), name=f"memory-sub:{self.subject}")

    async def _run(self) -> None:
        # one message at a time, in order, as nats-py runs a subscription's callback
        while True:
            msg = await self.inbox.get()
            try:
                await self.cb(msg)
            except Exception:  # noqa: BLE001 - nats-py reports a callback's error and goes on
                self.router.callback_errors += 1
            finally:
                self.router.busy -= 1

    async def unsubscribe(self) -> None:
        if self in self.router.core_subs:
            self.router.core_subs.remove(self)
            self.router.busy -= self.inbox.qsize()  # never handled now
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)


class Router:
    """The one bus every in-memory connection shares."""

    def __init__(self) -> None:
        from .jetstream import Streams

        self.log: list[Recorded] = []
        self.core_subs: list[_CoreSub] = []
        self.streams = Streams(self)
        self.busy = 0  # messages queued or being handled by a core subscription or a consumer
        self.callback_errors = 0
        self._published = asyncio.Event()
        self._inboxes = itertools.count()
        self._rotation = itertools.count()  # which member of a queue group answers

    def connect(self) -> MemoryNats:
        return MemoryNats(self)

    def new_inbox(self) -> str:
        return f"_INBOX.memory.{next(self._inboxes)}"

    def publish(self, subject: str, data: bytes, headers: dict[str, str] | None, reply: str, nc: MemoryNats) -> bool:
        """Record, hand to the core subscribers (one per queue group) and store in the subject's
        stream; whether any stream took it."""
        self.log.append(Recorded(subject, data, dict(headers or {})))
        groups: dict[str, list[_CoreSub]] = {}
        for sub in list(self.core_subs):
            if subject_matches(sub.subject, subject):
                groups.setdefault(sub.queue or f"\0{id(sub)}", []).append(sub)
        turn = next(self._rotation)
        for members in groups.values():
            chosen = members[turn % len(members)]
            self.busy += 1
            chosen.inbox.put_nowait(CoreMsg(subject, data, reply, dict(headers or {}), nc))
        stored = self.streams.store(subject, data, dict(headers or {}))
        self._published.set()
        return stored or bool(groups)

    def messages(self, filter_subject: str) -> list[Recorded]:
        return [m for m in self.log if subject_matches(filter_subject, m.subject)]

    async def wait_for(self, filter_subject: str, check: Callable[[Recorded], bool] = lambda m: True,
                       timeout: float = WAIT_S, start: int = 0) -> Recorded:
        """The first message from `start` on (an index of `log`) on `filter_subject` that passes
        `check`, waiting for publishes up to `timeout` seconds."""
        loop = asyncio.get_running_loop()
        deadline, seen = loop.time() + timeout, start
        while True:
            for i in range(seen, len(self.log)):
                m = self.log[i]
                if subject_matches(filter_subject, m.subject) and check(m):
                    return m
            seen = len(self.log)
            self._published.clear()
            left = deadline - loop.time()
            if left <= 0:
                raise TimeoutError(f"no message on {filter_subject} within {timeout} s; last: "
                                   f"{[m.subject for m in self.log[-5:]]}")
            try:
                await asyncio.wait_for(self._published.wait(), timeout=left)
            except TimeoutError:
                continue

    async def quiet(self, timeout: float = WAIT_S, rounds: int = 20) -> None:
        """Until nothing is queued or being handled for `rounds` turns of the event loop in a
        row (what is left then is the services' own timers, not the bus)."""
        loop = asyncio.get_running_loop()
        deadline, calm = loop.time() + timeout, 0
        while calm < rounds:
            assert loop.time() < deadline, f"the bus is still busy after {timeout} s ({self.busy} in flight)"
            calm = calm + 1 if self.busy == 0 else 0
            await asyncio.sleep(0)  # one turn of the loop: not a wait for time


    async def close(self) -> None:
        """End every subscription still open (a service's health subscription is never ended)."""
        for sub in list(self.core_subs):
            await sub.unsubscribe()
        await self.streams.close()


class MemoryNats:
    """One connection (a service's, or a fleet's): nats-py's Client, the part BKE uses."""

    def __init__(self, router: Router) -> None:
        self.router = router
        self.is_connected, self.is_closed = True, False

    @property
    def connected_url(self) -> Any:
        return None

    def new_inbox(self) -> str:
        return self.router.new_inbox()

    async def publish(self, subject: str, payload: bytes = b"", reply: str = "",
                      headers: dict[str, str] | None = None) -> None:
        self.router.publish(subject, payload, headers, reply, self)

    async def subscribe(self, subject: str, queue: str = "", cb: Any = None, **_: Any) -> _CoreSub:
        sub = _CoreSub(subject, queue, cb, self.router)
        self.router.core_subs.append(sub)
        sub.start()
        return sub

    async def request(self, subject: str, payload: bytes = b"", timeout: float = 0.5,
                      headers: dict[str, str] | None = None) -> CoreMsg:
        inbox = self.new_inbox()
        answer: asyncio.Future[CoreMsg] = asyncio.get_running_loop().create_future()

        async def on_reply(msg: CoreMsg) -> None:
            if not answer.done():
                answer.set_result(msg)

        sub = await self.subscribe(inbox, cb=on_reply)
        try:
            if not any(subject_matches(s.subject, subject) for s in self.router.core_subs):
                raise NoRespondersError
            self.router.publish(subject, payload, headers, inbox, self)
            try:
                return await asyncio.wait_for(answer, timeout)
            except TimeoutError as exc:
                raise NatsTimeout from exc
        finally:
            await sub.unsubscribe()

    async def flush(self, timeout: float = 10.0) -> None:
        return None

    def jetstream(self, **_: Any) -> Any:
        from .jetstream import MemoryJetStream

        return MemoryJetStream(self)

    async def drain(self) -> None:
        await self.close()

    async def close(self) -> None:
        self.is_connected, self.is_closed = False, True
