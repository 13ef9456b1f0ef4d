"""What a fleet's agents received and answered, phase by phase: for bench/install.py's figures
(when each phase's first and last command came, the bytes each way) and its same-bytes floor
(a replay of exactly these sizes, node by node). A real agent keeps no trace.

The clock is injected (the bench passes time.perf_counter), so that its times line up with the
bench's own marks of each phase's start and end."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

__all__ = ["CommandTrace", "PhaseTrace", "PhaseTraffic"]


class CommandTrace(Protocol):
    def received(self, phase: str, node: str, size: int) -> None: ...

    def answered(self, phase: str, node: str, size: int) -> None: ...


@dataclass
class PhaseTraffic:
    commands: int = 0
    command_bytes: int = 0
    result_bytes: int = 0
    first_command_at: float = 0.0
    last_command_at: float = 0.0
    last_result_at: float = 0.0
    # node -> the sizes of its commands and of their results, in the order they came
    by_node: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    _pending: dict[str, list[int]] = field(default_factory=dict)


class PhaseTrace:
    """A CommandTrace that keeps each phase's traffic (a command's phase is its `phase` field:
    the install's phase slug, an upgrade's step). A redelivered command counts again."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.phases: dict[str, PhaseTraffic] = {}

    def received(self, phase: str, node: str, size: int) -> None:
        t = self.phases.setdefault(phase, PhaseTraffic())
        now = self.clock()
        if not t.commands:
            t.first_command_at = now
        t.commands += 1
        t.command_bytes += size
        t.last_command_at = now
        t._pending.setdefault(node, []).append(size)

    def answered(self, phase: str, node: str, size: int) -> None:
        t = self.phases.setdefault(phase, PhaseTraffic())
        t.result_bytes += size
        t.last_result_at = self.clock()
        sent = t._pending.get(node)
        t.by_node.setdefault(node, []).append((sent.pop(0) if sent else 0, size))
