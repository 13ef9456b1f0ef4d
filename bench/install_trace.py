"""Where an install's time goes, phase by phase (bench/install.py): each phase's wall time, the
CPU seconds each process spent in it, NATS' message and byte counters over it, when its first and
last command reached an agent and how long after its last result the next phase began; and the
schedule of a same-bytes floor, a replay of the commands and results the install's agents saw.

The marks are taken when the install's `phase` events arrive (bke.v1.install.<c>.phase, core
NATS): a phase runs from its Running event to its end event, and the CPU and counters are read at
each, so a phase's share includes what its events took to arrive (a few milliseconds)."""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from bke.contracts.install import PhaseChanged, install_subject
from bke_agent.trace import PhaseTrace

__all__ = ["Mark", "PhaseClock", "floor_waves", "phase_rows", "print_phase_rows"]


@dataclass
class Mark:
    phase: str
    status: str
    at: float  # time.perf_counter()
    cpu: dict[str, float]  # process name -> CPU seconds so far
    nats: dict[str, int]  # NATS' /varz counters so far


@dataclass
class PhaseClock:
    """Marks each phase event of `cluster`'s install as it arrives."""

    cluster: str
    cpu: Callable[[], dict[str, float]]
    counters: Callable[[], dict[str, int]]
    marks: list[Mark] = field(default_factory=list)
    _sub: object = None

    async def start(self, nc) -> None:  # type: ignore[no-untyped-def]
        async def on(msg) -> None:  # type: ignore[no-untyped-def]
            ev = PhaseChanged.model_validate_json(msg.data)
            self.marks.append(Mark(ev.phase, str(ev.status), time.perf_counter(), self.cpu(), self.counters()))

        self._sub = await nc.subscribe(install_subject(self.cluster, "phase"), cb=on)
        await nc.flush()

    async def stop(self) -> None:
        if self._sub is not None:
            await self._sub.unsubscribe()  # type: ignore[attr-defined]


def _span(marks: list[Mark], phase: str) -> tuple[Mark, Mark] | None:
    ours = [m for m in marks if m.phase == phase]
    start = next((m for m in ours if m.status == "Running"), None)
    end = next((m for m in reversed(ours) if m.status != "Running"), None)
    return (start, end) if start and end else None


def phase_rows(marks: list[Mark], trace: PhaseTrace) -> list[dict[str, str]]:
    """One row a phase that ran, in the order they began."""
    order = list(dict.fromkeys(m.phase for m in marks if m.status == "Running"))
    starts = {p: s[0].at for p in order if (s := _span(marks, p))}
    rows = []
    for i, phase in enumerate(order):
        span = _span(marks, phase)
        if span is None:
            continue
        a, b = span
        t = trace.phases.get(phase)
        nxt = starts.get(order[i + 1]) if i + 1 < len(order) else None
        cpu = {k: b.cpu.get(k, 0.0) - a.cpu.get(k, 0.0) for k in a.cpu}
        n = {k: b.nats[k] - a.nats[k] for k in a.nats}
        rows.append({
            "phase": phase, "wall": f"{b.at - a.at:.1f}",
            "first cmd": f"{t.first_command_at - a.at:.1f}" if t and t.commands else "-",
            "last cmd": f"{t.last_command_at - a.at:.1f}" if t and t.commands else "-",
            "last result -> next": f"{nxt - t.last_result_at:.2f}" if t and t.commands and nxt else "-",
            "commands": str(t.commands if t else 0),
            "MB cmd/result": f"{t.command_bytes / 1e6:.1f}/{t.result_bytes / 1e6:.1f}" if t else "-",
            "CPU s": ", ".join(f"{k} {v:.1f}" for k, v in cpu.items() if v >= 0.05) or "-",
            "NATS msgs in/out": f"{n['in_msgs']:,}/{n['out_msgs']:,}",
            "NATS MB in/out": f"{n['in_bytes'] / 1e6:.1f}/{n['out_bytes'] / 1e6:.1f}",
        })
    return rows


def print_phase_rows(rows: list[dict[str, str]]) -> None:
    if not rows:
        return
    cols = list(rows[0])
    widths = {c: max(len(c), *(len(r[c]) for r in rows)) for c in cols}
    print("         " + "  ".join(c.ljust(widths[c]) for c in cols), flush=True)
    for r in rows:
        print("         " + "  ".join(r[c].ljust(widths[c]) for c in cols), flush=True)


def floor_waves(trace: PhaseTrace, phases: list[str]) -> list[list[tuple[str, int, int]]]:
    """The same-bytes floor's schedule: one wave a phase, in the install's order, each the
    (node, command size, result size) of every command the install's agents answered in it."""
    waves = []
    for phase in phases:
        t = trace.phases.get(phase)
        if t is not None and t.by_node:
            waves.append([(node, c, r) for node, sizes in t.by_node.items() for c, r in sizes])
    return waves
