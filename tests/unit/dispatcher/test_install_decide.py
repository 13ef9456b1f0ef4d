"""The install's decision in the loop's terms (ops/install/decide.py), table-driven, without Redis
or the bus: the record's phases and the current phase's view in, one decision out."""
from __future__ import annotations

import pytest

from bke.contracts.statuses import OperationStatus
from bke.core.operation import Fail, RunLocally, Send, Succeed, Wait
from bke.core.plan import plan_spec_text
from bke_dispatcher.decide import Observed, PhaseRecord, PhaseStatus
from bke_dispatcher.ops.install.decide import EXPLAIN, LOCAL, PHASE_DONE, RESEND, SKIP, START, decide, progress
from bke_dispatcher.ops.install.record import InstallRecord, PhaseView
from bke_dispatcher.phases import PHASES, phase_by_slug
from bke_dispatcher.readiness import InputRecord, InputStatus

PLAN = plan_spec_text(open("examples/seed-3m1w.yaml").read()).plan
READY = {"render": InputRecord(InputStatus.READY, "d"), "certs": InputRecord(InputStatus.READY, "d")}
DONE, RUN = PhaseRecord(PhaseStatus.SUCCEEDED), PhaseStatus.RUNNING


def _at(slug: str, current: PhaseRecord, *, agents: int = 4, applies: bool = True,
        inputs: dict[str, InputRecord] = READY) -> InstallRecord:
    """An install whose phases before `slug` succeeded and whose `slug` stands as `current`."""
    phases, before = {}, True
    for p in PHASES:
        if p.slug == slug:
            phases[p.slug], before = current, False
        elif before:
            phases[p.slug] = DONE
    rec = InstallRecord(request_id="r", cluster=PLAN.cluster, plan_digest="d", phases=phases, inputs=inputs)
    phase = phase_by_slug(slug)
    targets = phase.targets(PLAN)
    rec.view = PhaseView(phase, PLAN, applies, targets, Observed(agents, inputs, len(PLAN.nodes), len(PLAN.nodes), "d"))
    return rec


NODES = tuple(n.hostname for n in PLAN.nodes)


@pytest.mark.parametrize(("rec", "want"), [
    # a service failed for this plan: whatever phase runs, the install fails naming it
    (_at("node-env", PhaseRecord(RUN), inputs={"render": InputRecord(InputStatus.FAILED, "d", "bad template", node="n1")}),
     Fail("renderer: bad template", ("n1",))),
    # a phase the plan has nothing for, then one that starts
    (_at("load-balancer", PhaseRecord(), applies=False), RunLocally(SKIP, ("load-balancer",))),
    (_at("node-env", PhaseRecord()), RunLocally(START, ("node-env",))),
    # agents: wait for every target's agent, then the phase is done
    (_at("agents", PhaseRecord(RUN), agents=3), Wait("3/4 agents registered", 1.0)),
    (_at("agents", PhaseRecord(RUN), agents=4), RunLocally(PHASE_DONE, ("agents",))),
    # commands: every target from the cursor, the retried first, then wait for the answers
    (_at("node-env", PhaseRecord(RUN)), Send(NODES)),
    (_at("node-env", PhaseRecord(RUN, cursor=2)), Send(NODES[2:])),
    (_at("node-env", PhaseRecord(RUN, failed=1, cursor=4, retry=True)), Send((), RESEND)),
    (_at("node-env", PhaseRecord(RUN, ok=2, cursor=4)), Wait("", 5.0)),
    (_at("node-env", PhaseRecord(RUN, ok=4, cursor=4)), RunLocally(PHASE_DONE, ("node-env",))),
    (_at("node-env", PhaseRecord(RUN, ok=3, failed=1, cursor=4)), RunLocally(EXPLAIN, ("node-env",))),
    # the dispatcher's own work, after the targets' answers if the phase has any
    (_at("addons", PhaseRecord(RUN)), RunLocally(LOCAL, ("addons",))),
    (_at("health", PhaseRecord(RUN, ok=4, cursor=4)), RunLocally(LOCAL, ("health",))),
    # a phase left Failed under a Running install stops it
    (_at("certs", PhaseRecord(PhaseStatus.FAILED, message="2 node(s) failed")), Fail("2 node(s) failed")),
])
def test_decide(rec, want):
    assert decide(rec) == want


def test_every_phase_finished_succeeds():
    rec = InstallRecord(request_id="r", cluster="c", phases={p.slug: DONE for p in PHASES})
    rec.phases["load-balancer"] = PhaseRecord(PhaseStatus.SKIPPED)
    assert rec.current(PHASES) is None and decide(rec) == Succeed()


def test_a_phase_is_never_decided_without_its_view():
    rec = _at("etcd", PhaseRecord(RUN))
    rec.view = PhaseView(phase_by_slug("certs"), PLAN, True, [], rec.view.seen)  # a view read for another phase
    with pytest.raises(RuntimeError, match="phase etcd decided without its view"):
        decide(rec)


def test_only_the_agents_phase_records_progress_without_commands():
    assert progress(_at("agents", PhaseRecord(RUN), agents=9).view) == 4  # its targets, at most
    assert progress(_at("node-env", PhaseRecord(RUN)).view) is None


def test_an_ended_record_is_announced_once_it_ends():
    rec = InstallRecord(request_id="r", cluster="c")
    assert rec.running and rec.announced and not rec.end_pending
    rec.finish(OperationStatus.FAILED, "why", "t1")
    assert not rec.running and not rec.announced and rec.end_pending and rec.message == "why"
