"""The operations a service runs on the loop, each driven by its own Runner (one reconcile loop
per cluster, woken by kicks): an agent's answer goes to the operation whose command it answers,
and they all resume and stop together."""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from bke.adapters.runner import Outcome, Runner
from bke.contracts.agent import CommandResult
from bke.contracts.operation_ref import OperationRef

__all__ = ["DEBOUNCE_S", "Driven", "Operations"]

DEBOUNCE_S = 0.2  # the Runner's own default


class Driven(Protocol):
    """What of an operation's loop (OperationLoop) the runners and the results need."""

    kick: Callable[[str], None]

    def owns(self, ref: OperationRef) -> bool: ...

    async def reconcile(self, cluster: str) -> Outcome: ...

    async def on_result(self, res: CommandResult) -> None: ...

    async def resume_all(self) -> list[str]: ...


class Operations:
    def __init__(self) -> None:
        self._driven: list[tuple[Driven, Runner]] = []
        self._held: list[Callable[[str], None]] = []  # the kicks of the operations a pause holds

    def drive(self, loop: Driven, paused: Callable[[str], Awaitable[bool]] | None = None,
              debounce_s: float = DEBOUNCE_S) -> Runner:
        """Run `loop` on a Runner of its own; `paused`: asked before every pass (a paused cluster
        takes no new step), None for an operation a pause does not hold; `debounce_s`: the
        runner's coalescing window (bke.adapters.runner)."""
        runner = Runner(loop, paused=paused, debounce_s=debounce_s)
        loop.kick = runner.kick
        self._driven.append((loop, runner))
        if paused is not None:
            self._held.append(runner.kick)
        return runner

    def held_by_pause(self) -> list[Callable[[str], None]]:
        """The kicks of the operations a pause holds: a resume wakes them (bke.adapters.pausing)."""
        return list(self._held)

    async def on_result(self, ref: OperationRef, res: CommandResult) -> bool:
        """Record an answer with the operation `ref` (whose command it answers); False if none's."""
        for loop, _ in self._driven:
            if loop.owns(ref):
                await loop.on_result(res)
                return True
        return False

    async def resume_all(self) -> list[str]:
        resumed: list[str] = []
        for loop, _ in self._driven:
            resumed += await loop.resume_all()
        return resumed

    async def stop(self) -> None:
        for _, runner in self._driven:
            await runner.stop()
