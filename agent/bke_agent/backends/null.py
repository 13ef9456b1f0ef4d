"""The `NullBackend`: every step succeeds at once and touches nothing.

Why: the install benchmark runs thousands of agents in one process to measure orchestration
(the bus, the consumers, the journal, the dispatcher), not the steps. Everything around the
step (consume, journal, result, ack) is the real agent's code; only this part costs nothing.
Sealed content is not opened either: decrypting is a step's cost. A `ReplaceFiles` step
succeeds too (no backup, no write, no probe): the upgrade benchmark measures the rolling order.
"""
from __future__ import annotations

from typing import Literal

from bke.contracts.agent_steps import Step

from .base import Content, StepOutcome

__all__ = ["NullBackend"]

_DONE = StepOutcome()


class NullBackend:
    kind: Literal["host", "lab"] = "lab"

    def __init__(self) -> None:
        self.steps_run = 0

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def execute(self, step: Step, content: Content) -> StepOutcome:
        self.steps_run += 1
        return _DONE
