"""One reconcile loop per cluster, woken by events (`kick`) or by its own wait delay: the
dispatcher's installs and rotations and the upgrader's upgrades each run one.

Kicks coalesce: a thousand results arriving together cause one reconcile, not a thousand.
A kick `at_once` (the answer that completes what the loop waits for: the upgrader's last result
of a batch) skips the coalescing window: nothing is left to coalesce, and an upgrade is ~40
batches in a row, each of which waited out the window once.
"""
from __future__ import annotations

import asyncio
import logging

from dataclasses import dataclass
from typing import Awaitable, Callable, Protocol

from bke.core.errors import TemporaryError, is_unavailable
from bke.adapters.tasks import cancel_and_wait

__all__ = ["DONE", "Kick", "Outcome", "PAUSED_RECHECK_S", "Reconciler", "Runner"]

log = logging.getLogger("bke.reconcile")
# A paused cluster's loop looks again this often; a resume kicks it at once (bke.contracts.pause).
PAUSED_RECHECK_S = 30.0


@dataclass(frozen=True)
class Outcome:
    """What one reconcile pass (or one local piece of work) came to."""

    status: str  # "done" | "wait" | "failed"
    delay: float = 0.0
    reason: str = ""
    node: str | None = None
    kind: str = "operational"  # of a failure: "invalid" (the input was refused) | "operational"


DONE = Outcome("done")


class Reconciler(Protocol):
    async def reconcile(self, cluster: str) -> Outcome:
        """One pass."""


class Kick(Protocol):
    """Wake a cluster's loop (Runner.kick): `at_once` skips the coalescing window, for an answer
    after which nothing more is awaited."""

    def __call__(self, cluster: str, at_once: bool = False) -> None: ...


class Runner:
    def __init__(self, engine: Reconciler, debounce_s: float = 0.2,
                 paused: Callable[[str], Awaitable[bool]] | None = None):
        self.engine = engine
        # Asked before every pass: a paused cluster takes no new step (whatever was sent runs to
        # its end and its answers are kept; they are folded in once resumed).
        self.paused = paused
        # After a wake-up, let more results land before reconciling again: at 5,000 nodes a
        # reconcile per result would cost more than the results themselves.
        self.debounce_s = debounce_s
        self._events: dict[str, asyncio.Event] = {}
        self._at_once: dict[str, asyncio.Event] = {}  # set by a kick that must not wait the window
        self._tasks: dict[str, asyncio.Task] = {}
        # Each stop starts a new generation: a loop of an older one ends at its next turn even
        # if its cancellation was swallowed (bke.adapters.tasks), and a kick after the stop (the state-loss
        # reaction resumes the same runner) starts a loop of the new generation.
        self._generation = 0
        self._task_generation: dict[str, int] = {}

    def kick(self, cluster: str, at_once: bool = False) -> None:
        task = self._tasks.get(cluster)
        if task is None or task.done() or self._task_generation.get(cluster) != self._generation:
            self._events[cluster] = asyncio.Event()
            self._at_once[cluster] = asyncio.Event()
            self._task_generation[cluster] = self._generation
            self._tasks[cluster] = asyncio.create_task(self._loop(cluster, self._generation), name=f"reconcile:{cluster}")
        else:
            if at_once:
                self._at_once[cluster].set()
            self._events[cluster].set()

    async def _loop(self, cluster: str, generation: int) -> None:
        event, at_once = self._events[cluster], self._at_once[cluster]
        held = False
        while generation == self._generation:  # a swallowed cancellation (bke.adapters.tasks) still ends it
            event.clear()
            at_once.clear()
            try:
                if self.paused is not None and await self.paused(cluster):
                    if not held:
                        log.info("paused: no new step until resumed", extra={"cluster": cluster})
                    held, delay = True, PAUSED_RECHECK_S
                    await self._wait(event, at_once, delay)
                    continue
                if held:
                    log.info("resumed", extra={"cluster": cluster})
                    held = False
                outcome = await self.engine.reconcile(cluster)
                if outcome.status in ("done", "failed"):
                    return
                delay = outcome.delay
            except TemporaryError as exc:
                delay = exc.delay
                log.info("reconcile waits: %s", exc, extra={"cluster": cluster})
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - keep the loop alive; state in Redis is intact
                if is_unavailable(exc):  # an outage: one rate-limited line, not a traceback every 2 s
                    log.warning("reconcile waits for the store: %s: %s", type(exc).__name__, exc,
                                extra={"cluster": cluster, "rate_key": "reconcile-unavailable"})
                else:
                    log.exception("reconcile failed; retrying", extra={"cluster": cluster})
                delay = 2.0
            await self._wait(event, at_once, delay)

    async def _wait(self, event: asyncio.Event, at_once: asyncio.Event, delay: float) -> None:
        try:
            await asyncio.wait_for(event.wait(), timeout=delay)
        except TimeoutError:
            return
        if self.debounce_s > 0 and not at_once.is_set():
            try:  # the coalescing window (not synchronisation), cut short by a kick at once
                await asyncio.wait_for(at_once.wait(), timeout=self.debounce_s)
            except TimeoutError:
                pass

    async def stop(self) -> None:
        self._generation += 1
        await cancel_and_wait(list(self._tasks.values()))
