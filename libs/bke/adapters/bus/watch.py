"""Follow events as they are published: used by the CLI (`bke apply`, the lab) and by tests.

A core NATS subscription sees every message published on matching subjects, including those
that JetStream stores; nothing is consumed from any durable consumer.
"""
from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any, Callable

from nats.aio.client import Client as NatsClient

__all__ = ["Seen", "EventWatch"]


@dataclass(frozen=True)
class Seen:
    subject: str
    data: dict[str, Any]


class EventWatch:
    def __init__(self, nc: NatsClient, subjects: list[str]):
        self.nc, self.subjects = nc, subjects
        self.seen: list[Seen] = []
        self._cond = asyncio.Condition()
        self._subs: list[Any] = []

    async def __aenter__(self) -> "EventWatch":
        for s in self.subjects:
            self._subs.append(await self.nc.subscribe(s, cb=self._on_msg))
        await self.nc.flush()
        return self

    async def __aexit__(self, *exc: object) -> None:
        for sub in self._subs:
            await sub.unsubscribe()

    async def _on_msg(self, msg: Any) -> None:
        try:
            data = json.loads(msg.data)
        except (ValueError, RecursionError):  # json nests by recursion: `[[[...` 100,000 deep is a forger's message
            data = {"_raw": msg.data.decode(errors="replace")}
        async with self._cond:
            self.seen.append(Seen(msg.subject, data if isinstance(data, dict) else {"_value": data}))
            self._cond.notify_all()

    async def wait_for(self, predicate: Callable[[Seen], bool], timeout: float) -> Seen:
        """The first event (already seen or arriving) that matches, or TimeoutError."""

        def first() -> Seen | None:
            return next((e for e in self.seen if predicate(e)), None)

        async with self._cond:
            found = first()
            if found is None:
                await asyncio.wait_for(self._cond.wait_for(lambda: first() is not None), timeout)
                found = first()
        assert found is not None
        return found

    async def wait_more(self, count: int, timeout: float) -> bool:
        """Wait until more than `count` events were seen; False at the timeout."""
        async with self._cond:
            try:
                await asyncio.wait_for(self._cond.wait_for(lambda: len(self.seen) > count), timeout)
            except TimeoutError:
                return False
        return True
