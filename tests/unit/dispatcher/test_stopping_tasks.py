"""A stop that a swallowed cancellation cannot hang (bke.adapters.tasks): the reconcile runner and the
periodic rounds end within their bound even when their work eats the CancelledError."""
from __future__ import annotations

import asyncio
import time

from bke.adapters.periodic import Periodic
from bke.adapters.tasks import cancel_and_wait
from bke.adapters.runner import Outcome, Runner


class SwallowingEngine:
    """A reconcile that swallows its cancellation, as CPython 3.11's wait_for can (gh-86296)."""

    def __init__(self) -> None:
        self.calls = 0
        self.entered = asyncio.Event()

    async def reconcile(self, cluster: str) -> Outcome:
        self.calls += 1
        self.entered.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            pass  # swallowed: the loop would go round again
        return Outcome("wait", delay=0.01)


async def test_the_runner_stops_although_its_reconcile_swallows_the_cancellation():
    engine = SwallowingEngine()
    runner = Runner(engine, debounce_s=0.0)
    runner.kick("c1")
    await asyncio.wait_for(engine.entered.wait(), 5)
    t0 = time.monotonic()
    await asyncio.wait_for(runner.stop(), 10)
    assert time.monotonic() - t0 < 6
    task = runner._tasks["c1"]
    await asyncio.wait_for(asyncio.shield(task), 5)  # the flag ended the loop after the swallowed cancel
    assert task.done() and engine.calls == 1
    # the state-loss reaction stops the loops and later resumes with the same runner
    engine.entered.clear()
    runner.kick("c1")
    await asyncio.wait_for(engine.entered.wait(), 5)
    assert runner._tasks["c1"] is not task and engine.calls == 2
    await asyncio.wait_for(runner.stop(), 10)


async def test_cancel_and_wait_names_what_is_left_and_returns_within_its_bound(caplog):
    release = asyncio.Event()

    async def stubborn() -> None:
        while not release.is_set():
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                continue

    task = asyncio.create_task(stubborn(), name="stubborn")
    await asyncio.sleep(0)  # let it start (a yield, not a wait for anything)
    t0 = time.monotonic()
    left = await cancel_and_wait([task], timeout=0.2)
    assert left == [task] and time.monotonic() - t0 < 2
    assert "task stubborn did not end" in caplog.text
    release.set()
    task.cancel()
    await asyncio.wait_for(task, 5)
    assert await cancel_and_wait([task]) == []


async def test_periodic_rounds_end_at_stop_and_start_again():
    rounds = []
    entered = asyncio.Event()

    async def work() -> None:
        rounds.append(1)
        entered.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            pass  # swallowed

    import logging
    p = Periodic("p", 0.01, work, logging.getLogger("t"))
    p.start()
    await asyncio.wait_for(entered.wait(), 5)
    await asyncio.wait_for(p.stop(), 10)
    assert p._task is None and len(rounds) == 1
    entered.clear()
    p.start()  # a stopped Periodic can be started again
    await asyncio.wait_for(entered.wait(), 5)
    await asyncio.wait_for(p.stop(), 10)
    assert len(rounds) == 2
