"""The loops' life: resumed once the service has started (waiting for Redis if it is away),
stopped before the store's client closes; stopped too when the store lost its state (the
running installs fail), and resumed when it is restored (bke.adapters.state.epoch)."""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from bke.adapters.bus.service import REDIS_PROBE_S
from bke.adapters.state.epoch import EpochWatch, watch_epoch
from bke.adapters.tasks import cancel_and_wait

from ..state_loss import StateLossReaction
from .basics import Basics
from .loops import Loops

__all__ = ["run_loops", "watch_state"]

log = logging.getLogger("bke.dispatcher")
Background = Callable[[Callable[[], bool]], Awaitable[None]]  # runs until its argument says stopping


def watch_state(b: Basics, loops: Loops) -> EpochWatch:
    async def resume() -> list[str]:
        # a restored backup may predate results that were counted, acknowledged and lost since
        for cluster in await b.state.installs():
            asked = await loops.installs.reask_in_flight(cluster)
            if asked:
                log.warning("state restored: commands in flight sent again to %s", ", ".join(asked[:10]),
                            extra={"cluster": cluster})
        return await loops.resume()

    loss = StateLossReaction(b.state, b.publish, b.now, loops.stop, resume)
    return watch_epoch(b.svc, b.redis, interval_s=b.settings.epoch_check_s, on_lost=loss.on_lost,
                       on_restored=loss.on_restored, on_intact=loss.on_intact)


def run_loops(b: Basics, loops: Loops, *background: tuple[str, Background]) -> None:
    """Once started: the loops resume, the health rounds start, and each `background` job (a
    name, a function of the stop flag) runs until the service stops. At stop, those jobs end,
    then the loops, before the store's client closes."""
    svc = b.svc
    tasks: list[asyncio.Task] = []
    stopping: list[bool] = []  # set once the service stops

    def stopped() -> bool:
        return bool(stopping)

    async def resume() -> None:
        # the running installs and operations, once Redis answers
        await svc.retry_while_store_away(loops.resume, stopped, log)

    async def started() -> None:
        tasks.append(asyncio.create_task(resume(), name="dispatcher:resume"))
        for name, job in background:
            tasks.append(asyncio.create_task(job(stopped), name=f"dispatcher:{name}"))
        loops.health.start()

    async def stop() -> None:
        stopping.append(True)
        # bounded: redis-py can swallow a cancellation while it connects; the flag ends the loop
        await cancel_and_wait(tasks, timeout=2 * REDIS_PROBE_S)
        await loops.stop()
        await loops.health.stop()
        await b.redis.aclose()

    svc.after_start.append(started)
    svc.on_stop.insert(0, stop)
