"""The phase decision, table-driven, without Redis or the bus."""
from __future__ import annotations

import pytest

from bke_dispatcher.decide import (
    Fail, Observed, PhaseRecord, PhaseStatus, Resend, RunLocal, Send, Succeed, Wait, decide_step, failed_nodes_reason,
)
from bke_dispatcher.readiness import InputRecord, InputStatus

READY = {"render": InputRecord(InputStatus.READY, "d"), "certs": InputRecord(InputStatus.READY, "d")}
ALL_IN = Observed(agents=4, inputs=READY, sealed=4, nodes=4, plan_digest="d")
NOTHING = Observed(agents=0, inputs={}, sealed=0, nodes=4, plan_digest="d")
RUN = PhaseStatus.RUNNING


def rec(ok=0, failed=0, cursor=0, retry=False):
    return PhaseRecord(status=RUN, ok=ok, failed=failed, cursor=cursor, retry=retry)


@pytest.mark.parametrize(
    ("needs", "local", "conc", "targets", "record", "seen", "want"),
    [
        # the dispatcher's own work
        ((), "addons", None, 0, rec(), ALL_IN, RunLocal("addons")),
        # agents: wait with progress, then succeed
        (("agents",), None, None, 4, rec(), Observed(3, {}, 0, 4, "d"), Wait("3/4 agents registered", 1.0, progress=3)),
        (("agents",), None, None, 4, rec(), Observed(5, {}, 0, 4, "d"), Succeed(progress=4)),
        # no targets
        (("render",), None, None, 0, rec(), NOTHING, Succeed()),
        # inputs first
        (("render", "checksums"), None, None, 4, rec(), NOTHING, Wait("waiting for rendered files", 0.5)),
        (("certs",), None, None, 4, rec(), Observed(4, READY, 2, 4, "d"),
         Wait("waiting for certificates sealed to every agent (2/4)", 0.5)),
        # the first batch: every target, or the phase's concurrency
        (("render",), None, None, 4, rec(), ALL_IN, Send(0, 4)),
        ((), None, 2, 5, rec(), ALL_IN, Send(0, 2)),
        ((), None, 2, 5, rec(ok=1, cursor=2), ALL_IN, Send(2, 1)),
        ((), None, 2, 5, rec(ok=0, cursor=2), ALL_IN, Wait("", 5.0)),
        ((), None, 2, 5, rec(ok=4, cursor=4), ALL_IN, Send(4, 1)),
        # retries go out first
        ((), None, None, 4, rec(ok=3, failed=1, cursor=4, retry=True), ALL_IN, Resend()),
        # outcomes
        ((), None, None, 4, rec(ok=4, cursor=4), ALL_IN, Succeed()),
        ((), None, None, 4, rec(ok=3, failed=1, cursor=4), ALL_IN, Fail()),
        ((), None, None, 4, rec(ok=2, failed=1, cursor=4), ALL_IN, Wait("", 5.0)),
    ],
)
def test_decide_step(needs, local, conc, targets, record, seen, want):
    assert decide_step(needs, local, conc, targets, record, seen) == want


def test_phase_record_from_its_stored_hash():
    assert PhaseRecord.from_hash({}) == PhaseRecord()
    r = PhaseRecord.from_hash({"status": "Running", "ok": "3", "failed": "1", "cursor": "4", "retry": "1", "message": "m"})
    assert r == PhaseRecord(PhaseStatus.RUNNING, 3, 1, 4, True, "m")
    assert PhaseRecord.from_hash({"retry": ""}).retry is False
    assert PhaseStatus.SKIPPED.finished and not PhaseStatus.FAILED.finished
    with pytest.raises(ValueError):
        PhaseRecord.from_hash({"status": "Sideways"})


def test_failure_reason_names_the_failed_nodes():
    cmds = {f"n{i:02}": {"status": "Failed", "step": "preflight", "stderr": f"port {i} taken"} for i in range(12)}
    cmds["ok1"] = {"status": "Succeeded", "step": "", "stderr": ""}
    reason, node = failed_nodes_reason(cmds)
    assert node == "n00"
    assert reason.startswith("12 node(s) failed: n00, n01") and "and 2 more" in reason and "ok1" not in reason
    assert reason.endswith("n00 step preflight: port 0 taken")
