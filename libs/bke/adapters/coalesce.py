"""Calls made in the same turn of the event loop, per key, served as one batch.

A subscriber handles a fetched batch's messages concurrently (bke.adapters.bus.fast_consumer):
they reach the same store read or the same publish within one turn. `Coalesced` queues each
call's item; the first call of a key schedules the batch, which runs once the others of that
turn have queued theirs, and each caller gets its own item's answer (or the batch's error as
its own). One round trip, or one message, for the batch instead of one per message; the caller
returns only once its item was served, so a delivery is acked after its part is done.

    checks = Coalesced(read_many)        # read_many(key, items) -> one answer per item, in order
    answer = await checks(cluster, item)
"""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Generic, TypeVar

__all__ = ["Coalesced"]

K = TypeVar("K", bound=Hashable)
I = TypeVar("I")  # noqa: E741 - an item
R = TypeVar("R")


class Coalesced(Generic[K, I, R]):
    def __init__(self, serve: Callable[[K, list[I]], Awaitable[Sequence[R]]]) -> None:
        self.serve = serve
        self._pending: dict[K, list[tuple[I, asyncio.Future[R]]]] = {}
        self._serving: set[asyncio.Future[None]] = set()

    async def __call__(self, key: K, item: I) -> R:
        fut: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        queue = self._pending.setdefault(key, [])
        queue.append((item, fut))
        if len(queue) == 1:  # the first of its turn serves the batch once the others had their turn
            task = asyncio.ensure_future(self._serve(key))
            self._serving.add(task)
            task.add_done_callback(self._serving.discard)
        return await fut

    async def _serve(self, key: K) -> None:
        await asyncio.sleep(0)  # the callers started with this one queue theirs first
        batch = self._pending.pop(key, [])
        try:
            out = await self.serve(key, [item for item, _ in batch])
        except BaseException as exc:  # each caller gets the outage (or the cancellation) as its own
            for _, fut in batch:
                if fut.done():
                    continue
                if isinstance(exc, Exception):
                    fut.set_exception(exc)
                else:
                    fut.cancel()
            if not isinstance(exc, Exception):
                raise
            return
        for (_, fut), got in zip(batch, out, strict=True):
            if not fut.done():  # its caller may have been cancelled meanwhile
                fut.set_result(got)
