"""Automatic renewal and the renewal gate, pure: when is an automatic renewal due, and when
must a renewal wait for the cluster's other operation."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from pydantic import ValidationError

from bke.contracts.certs import RenewCerts
from bke.core.pki.expiry import ExpiryRow
from bke_certs.renewal import OpsView, auto_renew_decision, auto_request_id, renew_refusal

NOW = datetime(2027, 1, 1, tzinfo=timezone.utc)
IDLE = OpsView(install="Succeeded", rotation="Succeeded", rotation_id="r0")


def row(instance: str, days: float, is_ca: bool = False) -> ExpiryRow:
    at = NOW + timedelta(days=days)
    return ExpiryRow(instance, instance.split("@")[0], None, is_ca, at, at - NOW, None if is_ca else "ca", ("m1",))


ROWS = [row("ca", 5, is_ca=True), row("apiserver@m1", 29), row("apiserver@m2", 31), row("admin.conf@m1", -1)]


def test_due_leaves_within_the_threshold_are_renewed_never_cas():
    d = auto_renew_decision(ROWS, NOW, timedelta(days=30), IDLE)
    assert d.action == "renew" and d.due == ("apiserver@m1", "admin.conf@m1")
    assert "2 certificate(s) expire within 30 days" in d.reason
    assert auto_renew_decision(ROWS, NOW, timedelta(days=10), IDLE).due == ("admin.conf@m1",)
    assert auto_renew_decision(ROWS[:1] + ROWS[2:3], NOW, timedelta(days=30), IDLE).action == "none"


@pytest.mark.parametrize("view, reason", [
    (OpsView(), "the install is not known to have finished"),
    (OpsView(install="Running"), "the install is Running"),
    (OpsView(install="Failed"), "the install is Failed"),
    (OpsView(install="Succeeded", rotation="Running", rotation_id="r9"), "rotation r9 is running"),
    (OpsView(install="Succeeded", rotation="Succeeded", pending="auto-1"), "renewal auto-1 is waiting for its rotation"),
    (OpsView(install="Succeeded", rotation="Succeeded", busy="upgrade u1 of c is running: one operation per cluster"),
     "upgrade u1 of c is running: one operation per cluster"),  # the slot's holder (bke.adapters.state.operation_slot)
])
def test_a_busy_cluster_is_skipped_until_the_next_tick(view, reason):
    d = auto_renew_decision(ROWS, NOW, timedelta(days=30), view)
    assert (d.action, d.reason) == ("skip", reason) and d.due


def test_a_requested_renewal_waits_only_for_another_rotation():
    req = RenewCerts(request_id="r2", cluster="c", names=["apiserver"])
    assert renew_refusal("c", req, IDLE) == ""
    assert renew_refusal("c", req, OpsView(install="Running")) == ""  # the dispatcher judges the install
    assert "rotation r1 of c is still running" in renew_refusal("c", req, OpsView(rotation="Running", rotation_id="r1"))
    assert "renewal r1 of c is still waiting" in renew_refusal("c", req, OpsView(pending="r1"))
    # its own redelivery is not refused by its own marks
    assert renew_refusal("c", req, OpsView(rotation="Running", rotation_id="r2", pending="r2")) == ""


def test_request_ids_and_the_request_contract():
    assert auto_request_id(NOW) == "auto-20270101T000000Z"
    RenewCerts(request_id=auto_request_id(NOW), cluster="c", within_days=30, origin="auto")
    for bad in ({}, {"names": ["a"], "withinDays": 3}):
        with pytest.raises(ValidationError, match="names / withinDays: give exactly one"):
            RenewCerts.model_validate({"requestId": "r", "cluster": "c", **bad})
    with pytest.raises(ValidationError, match="request_id|requestId"):
        RenewCerts(request_id="a/b", cluster="c", names=["all"])  # a slash would break command ids
