"""A round of work every N seconds, in a task of its own, that a failed round never stops.

The dispatcher's health monitor and the certs service's automatic renewal both run one.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable

from bke.adapters.tasks import cancel_and_wait

__all__ = ["Periodic"]


class Periodic:
    def __init__(self, name: str, interval_s: float, work: Callable[[], Awaitable[Any]], log: logging.Logger):
        self.name, self.interval_s, self.work, self.log = name, interval_s, work, log
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    def start(self) -> None:
        """Start the rounds (an interval of 0 or less: never)."""
        if self.interval_s > 0 and self._task is None:
            self._stopping = False
            self._task = asyncio.create_task(self._loop(), name=self.name)

    async def stop(self) -> None:
        self._stopping = True
        if self._task is not None:
            await cancel_and_wait([self._task])
            self._task = None

    async def _loop(self) -> None:
        while not self._stopping:
            await asyncio.sleep(self.interval_s)  # the period itself, not a synchronisation
            try:
                await self.work()
            except Exception:  # noqa: BLE001 - a failed round must not stop the next ones
                self.log.exception("%s: round failed", self.name)
