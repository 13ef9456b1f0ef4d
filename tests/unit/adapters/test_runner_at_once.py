"""The reconcile runner's coalescing window (bke.adapters.runner): ordinary kicks wait it out, a kick
`at_once` (the upgrader's last answer of a batch) does not, even one arriving inside it."""
from __future__ import annotations

import asyncio
import time

from bke.adapters.runner import Outcome, Runner

WINDOW_S = 3.0  # far longer than a pass here, so waiting it out shows


class Engine:
    def __init__(self) -> None:
        self.passes: asyncio.Queue[float] = asyncio.Queue()

    async def reconcile(self, cluster: str) -> Outcome:
        self.passes.put_nowait(time.monotonic())
        return Outcome("wait", delay=60.0)


async def _started() -> tuple[Engine, Runner]:
    engine = Engine()
    runner = Runner(engine, debounce_s=WINDOW_S)
    runner.kick("c1")  # starts the loop: its first pass runs at once
    await asyncio.wait_for(engine.passes.get(), 5)
    return engine, runner


async def test_an_ordinary_kick_waits_out_the_window():
    engine, runner = await _started()
    try:
        t0 = time.monotonic()
        runner.kick("c1")
        at = await asyncio.wait_for(engine.passes.get(), WINDOW_S + 5)
        assert at - t0 >= WINDOW_S - 0.1
    finally:
        await runner.stop()


async def test_a_kick_at_once_skips_the_window_also_when_it_comes_inside_it():
    engine, runner = await _started()
    try:
        t0 = time.monotonic()
        runner.kick("c1", at_once=True)
        at = await asyncio.wait_for(engine.passes.get(), WINDOW_S + 5)
        assert at - t0 < WINDOW_S / 2

        runner.kick("c1")  # an ordinary kick opens the window ...
        await asyncio.sleep(0.2)  # not synchronisation: the loop is now inside its window
        assert engine.passes.empty()
        t1 = time.monotonic()
        runner.kick("c1", at_once=True)  # ... and the batch's last answer cuts it short
        at = await asyncio.wait_for(engine.passes.get(), WINDOW_S + 5)
        assert at - t1 < WINDOW_S / 2
    finally:
        await runner.stop()
