"""The install's decision on the one loop: pure, over the record and its current phase's view.

Phases run top to bottom (phases.PHASES); within the current one, `decide.decide_step` (the
phase decision, table-tested on its own) says what to do, and this says it in the loop's terms:

    Fail(reason)                   a service failed for this plan (whatever phase runs), or the
                                   current phase failed (an install left Running over it)
    RunLocally(SKIP)               the phase does not apply to this plan: Skipped
    RunLocally(START)              the phase starts: Running
    Send(nodes)                    the next batch of commands, from the phase's cursor
    Send((), RESEND)               the commands a retry put back in flight (the carrier reads them)
    RunLocally(LOCAL)              the phase's own work in the dispatcher (addons, API checks)
    RunLocally(PHASE_DONE)         every target succeeded: the phase Succeeded, on to the next
    RunLocally(EXPLAIN)            every target answered and some failed: the carrier reads which
                                   and answers the Fail naming them
    Wait(reason, delay)            come back later; the reason is shown by `bke status`
    Succeed()                      every phase finished
"""
from __future__ import annotations

from bke.contracts.statuses import PhaseNeed, PhaseStatus
from bke.core.operation import Decision, Fail, RunLocally, Send, Succeed, Wait

from ... import decide as phase_decision
from ... import readiness
from ...phases import PHASES
from .record import InstallRecord, PhaseView

__all__ = ["EXPLAIN", "LOCAL", "PHASE_DONE", "RESEND", "SKIP", "START", "decide", "progress"]

SKIP, START, RESEND, LOCAL, PHASE_DONE, EXPLAIN = "skip", "start", "resend", "local", "phase-done", "explain"


def decide(rec: InstallRecord) -> Decision:
    # a service that failed for this plan fails the install now, whatever phase it is in
    failed = readiness.failed_input(rec.inputs, rec.plan_digest)
    if failed is not None:
        name, inp = failed
        return Fail(readiness.failure_reason(name, inp), (inp.node,) if inp.node else ())
    phase = rec.current(PHASES)
    if phase is None:
        return Succeed()
    pr = rec.phase(phase.slug)
    if pr.status is PhaseStatus.FAILED:  # a failed phase stops the install until `bke retry`
        return Fail(pr.message)
    view = rec.view
    if view is None or view.phase.slug != phase.slug:  # the carriers read it as a phase starts
        raise RuntimeError(f"install {rec.cluster}: phase {phase.slug} decided without its view")
    if not view.applies:
        return RunLocally(SKIP, (phase.slug,))
    if pr.status is PhaseStatus.PENDING:
        return RunLocally(START, (phase.slug,))
    d = phase_decision.decide_step(phase.needs, phase.local, phase.concurrency, len(view.targets), pr, view.seen)
    if isinstance(d, phase_decision.Send):
        return Send(tuple(n.hostname for n in view.targets[d.start : d.start + d.count]))
    if isinstance(d, phase_decision.Resend):
        return Send((), RESEND)
    if isinstance(d, phase_decision.RunLocal):
        return RunLocally(LOCAL, (phase.slug,))
    if isinstance(d, phase_decision.Succeed):
        return RunLocally(PHASE_DONE, (phase.slug,))
    if isinstance(d, phase_decision.Wait):
        return Wait(d.reason, d.delay)
    return RunLocally(EXPLAIN, (phase.slug,))


def progress(view: PhaseView) -> int | None:
    """The count a phase records as done without commands (the agents phase: agents registered
    among its targets); None for a phase whose results count themselves."""
    if PhaseNeed.AGENTS in view.phase.needs:
        return min(view.seen.agents, len(view.targets))
    return None
