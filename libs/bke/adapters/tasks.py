"""Stopping background tasks within a bound.

A cancelled task is not always a finished one. On Python 3.11 `asyncio.wait_for` returns the
inner result instead of raising when the cancellation and the inner future's completion land
in the same loop turn (CPython gh-86296, fixed in 3.12), and redis-py can swallow a
cancellation while it connects; a loop around either then runs on. Stopping a service must
not wait for such a task forever: each loop also checks a stop flag, and the stop waits a
bounded time and names what is left.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

__all__ = ["cancel_and_wait"]

log = logging.getLogger(__name__)


async def cancel_and_wait(tasks: Iterable[asyncio.Task], timeout: float = 5.0) -> list[asyncio.Task]:
    """Cancel `tasks` and wait at most `timeout` seconds for them to end; returns (and logs) the
    ones still running, whose loops are expected to see their stop flag on their next turn."""
    pending = [t for t in tasks if not t.done()]
    for task in pending:
        task.cancel()
    if not pending:
        return []
    _, left = await asyncio.wait(pending, timeout=timeout)
    for task in left:
        log.warning("task %s did not end within %.0fs of its cancellation", task.get_name(), timeout)
    return list(left)
