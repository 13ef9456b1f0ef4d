"""The phase decision: pure, over typed records. Redis and the bus are the install loop's business
(ops/install).

Given one phase's record, its number of targets and what has been observed (agents registered,
what the renderer and certs services said, bundles sealed), `decide_step` says what to do next:

    RunLocal(name)          work the dispatcher does itself (addons), or after every target succeeded
    Send(start, count)      send the next batch of commands, from the phase cursor
    Resend()                send the commands a retry put back in flight
    Wait(reason, delay)     come back later; the reason is shown by `bke status`
    Succeed()               every target succeeded
    Fail()                  every target answered and some failed (the loop reads which)

Table-driven tests: tests/unit/dispatcher/test_dispatcher_decide.py.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from bke.contracts.statuses import NodeStatus, PhaseNeed, PhaseStatus

from . import readiness
from .readiness import InputRecord

__all__ = [
    "Decision", "Fail", "Observed", "PhaseRecord", "PhaseStatus", "Resend", "RunLocal", "Send", "Succeed", "Wait",
    "decide_step", "failed_nodes_reason",
]


@dataclass(frozen=True)
class PhaseRecord:
    """A phase as stored (`bke:<c>:phase:<slug>`), typed."""

    status: PhaseStatus = PhaseStatus.PENDING
    ok: int = 0
    failed: int = 0
    cursor: int = 0  # targets[:cursor] have been sent a command
    retry: bool = False  # a retry put failed nodes back in flight; they are sent again first
    message: str = ""
    total: int = 0  # its targets (set when the plan arrives)

    @classmethod
    def from_hash(cls, h: dict[str, str]) -> "PhaseRecord":
        return cls(
            status=PhaseStatus(h.get("status") or PhaseStatus.PENDING),
            ok=int(h.get("ok") or 0),
            failed=int(h.get("failed") or 0),
            cursor=int(h.get("cursor") or 0),
            retry=bool(h.get("retry")),
            message=h.get("message", ""),
            total=int(h.get("total") or 0),
        )


@dataclass(frozen=True)
class Observed:
    """What the phase may depend on, read once per reconcile."""

    agents: int  # registered agents of this cluster
    inputs: dict[str, InputRecord]
    sealed: int  # plan nodes whose bundles are sealed
    nodes: int  # plan nodes
    plan_digest: str


@dataclass(frozen=True)
class RunLocal:
    name: str


@dataclass(frozen=True)
class Send:
    start: int
    count: int


@dataclass(frozen=True)
class Resend:
    pass


@dataclass(frozen=True)
class Wait:
    reason: str
    delay: float
    progress: int | None = None  # a count to record as the phase's `done` (agents registered)


@dataclass(frozen=True)
class Succeed:
    progress: int | None = None


@dataclass(frozen=True)
class Fail:
    pass


Decision = Union[RunLocal, Send, Resend, Wait, Succeed, Fail]
IN_FLIGHT_RECHECK_S = 5.0  # results wake the loop; this is only the fallback


def decide_step(needs: tuple[PhaseNeed, ...], local: str | None, concurrency: int | None, targets: int,
                rec: PhaseRecord, seen: Observed) -> Decision:
    # 1. the dispatcher's own work, when the phase has no commands to send (else after them, 7.)
    if local and targets == 0:
        return RunLocal(local)
    # 2. the agents phase only waits for every target's agent to announce itself
    if PhaseNeed.AGENTS in needs:
        have = min(seen.agents, targets)
        if seen.agents < targets:
            return Wait(f"{seen.agents}/{targets} agents registered", 1.0, progress=have)
        return Succeed(progress=have)
    # 3. nothing to do on any node
    if targets == 0:
        return Succeed()
    # 4. the other services' work must be there first
    waiting = readiness.missing_input(needs, seen.inputs, seen.plan_digest, seen.sealed, seen.nodes)
    if waiting:
        return Wait(waiting, 0.5)
    # 5. retried nodes go out again before anything new
    if rec.retry:
        return Resend()
    # 6. the next batch, within the phase's concurrency (retried nodes left `failed`: in flight)
    limit = concurrency or targets
    in_flight = rec.cursor - rec.ok - rec.failed
    if rec.cursor < targets and in_flight < limit:
        return Send(rec.cursor, min(targets - rec.cursor, limit - max(in_flight, 0)))
    # 7. every target answered: the phase's outcome (a phase with local work does it now)
    if rec.ok >= targets:
        return RunLocal(local) if local else Succeed()
    if rec.ok + rec.failed >= targets:
        return Fail()
    # 8. commands in flight: progress is in the done/total counts
    return Wait("", IN_FLIGHT_RECHECK_S)


def failed_nodes_reason(commands: dict[str, dict]) -> tuple[str, str]:
    """The reason a phase failed, naming its failed nodes (ten at most) and the first one's
    failing step and output; with that first node."""
    failed = sorted((h, c) for h, c in commands.items() if c["status"] == NodeStatus.FAILED)
    first_node, first = failed[0]
    names = ", ".join(h for h, _ in failed[:10]) + (f" and {len(failed) - 10} more" if len(failed) > 10 else "")
    return f"{len(failed)} node(s) failed: {names}; {first_node} step {first['step']}: {first['stderr'][:500]}", first_node
