"""The dispatcher's judgement of what the renderer and certs services said: table-driven, no Redis."""
from __future__ import annotations

import pytest

from bke_dispatcher.readiness import InputRecord, InputStatus, failed_input, failure_reason, is_current, missing_input

R, F, Q = InputStatus.READY, InputStatus.FAILED, InputStatus.REQUESTED
D = "plan-digest"


@pytest.mark.parametrize(
    ("needs", "inputs", "sealed", "want"),
    [
        (("render",), {}, 0, "waiting for rendered files"),
        (("render",), {"render": InputRecord(R, D)}, 0, ""),
        (("render",), {"render": InputRecord(R, "other-plan")}, 0, "waiting for rendered files"),  # stale
        (("render",), {"render": InputRecord(R, "")}, 0, ""),  # digest not said: taken as current
        (("render",), {"render": InputRecord(Q, D)}, 0, "waiting for rendered files"),  # asked again
        (("certs",), {"certs": InputRecord(R, D)}, 3, "waiting for certificates sealed to every agent (3/4)"),
        (("certs",), {"certs": InputRecord(R, D)}, 4, ""),
        (("certs",), {}, 4, "waiting for the cluster's certificates"),
        ((), {}, 0, ""),
    ],
)
def test_missing_input(needs, inputs, sealed, want):
    assert missing_input(needs, inputs, D, sealed, 4) == want


@pytest.mark.parametrize(
    ("inputs", "want"),
    [
        ({}, None),
        ({"render": InputRecord(R, D)}, None),
        ({"render": InputRecord(F, "old-plan", reason="x")}, None),  # about a replaced plan
        ({"render": InputRecord(F, D, reason="refused", kind="invalid")}, "render"),
        ({"seal": InputRecord(F, "", reason="bad key", node="n1")}, "seal"),
        ({"certs": InputRecord(Q, D), "seal": InputRecord(F, D)}, "seal"),
        ({"render": InputRecord(F, D), "certs": InputRecord(F, D)}, "render"),  # table order
    ],
)
def test_failed_input(inputs, want):
    got = failed_input(inputs, D)
    assert (got[0] if got else None) == want


def test_failure_reason_names_the_service_and_records_round_trip():
    rec = InputRecord(F, D, reason="node n1: its agent's sealing key is unusable", kind="operational", node="n1")
    assert failure_reason("seal", rec) == "certs: node n1: its agent's sealing key is unusable"
    assert failure_reason("render", InputRecord(F, D, reason="etcd.extraArgs.x: refused")).startswith("renderer: ")
    assert InputRecord.from_doc(rec.to_doc()) == rec
    assert is_current("", D) and is_current(D, "") and not is_current("a", "b")
