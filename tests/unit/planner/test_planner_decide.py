"""The planner's pure decisions: a plan against what is stored (new, same, changed, replaceable),
and which install outcomes make a stored plan replaceable."""
from __future__ import annotations

import pytest

from bke.contracts import ClusterRejected, PlanCreated
from bke.contracts.install import InstallFinished
from bke_planner.decide import against_stored, decide_plan, replaceable_after

SEED = open("examples/seed-3m1w.yaml").read()
CHANGED = SEED.replace("role: [node]", "role: [node, etcd-event]")


def test_a_refused_flag_is_a_rejection_with_its_path() -> None:
    decision = decide_plan("r1", SEED.replace("certificates: {keyAlgorithm: ECDSA-P256}",
                                              'certificates: {keyAlgorithm: ECDSA-P256}\n      etcd: {extraArgs: {client-cert-auth: "0"}}'))
    assert isinstance(decision.event, ClusterRejected) and decision.plan is None
    assert [e.path for e in decision.event.errors] == ["cluster.spec.clusterConfig.cluster.etcd.extraArgs.client-cert-auth"]


@pytest.mark.parametrize(("stored", "replaceable", "outcome"), [
    (None, False, "new"),
    (None, True, "new"),  # a mark without a plan is meaningless
    ("same", False, "same"),
    ("same", True, "same"),  # the same plan again stays idempotent, the mark stays for a correction
    ("other", False, "rejected"),
    ("other", True, "replaces"),
])
def test_against_stored(stored: str | None, replaceable: bool, outcome: str) -> None:
    decision = decide_plan("r2", SEED)
    stored_digest = {"same": decision.digest, "other": "f" * 64, None: None}[stored]
    decided = against_stored(decision, stored_digest, replaceable=replaceable)
    got = ("rejected" if isinstance(decided.event, ClusterRejected)
           else "replaces" if decided.replaces else "same" if stored else "new")
    assert got == outcome
    if outcome == "replaces":
        assert decided.replaces == "f" * 64 and isinstance(decided.event, PlanCreated)
        assert decided.event.plan_digest == decision.digest
    if outcome == "rejected":
        err = decided.event.errors[0]
        assert err.path == "cluster.metadata.name" and "already exists with a different spec (plan ffffffffffff)" in err.message


def test_a_changed_spec_is_a_different_digest() -> None:
    assert decide_plan("a", SEED).digest != decide_plan("b", CHANGED).digest


@pytest.mark.parametrize(("status", "nodes_changed", "replaceable"), [
    ("Failed", False, True),
    ("Failed", True, False),
    ("Succeeded", False, False),
    ("Succeeded", True, False),
])
def test_replaceable_after(status: str, nodes_changed: bool, replaceable: bool) -> None:
    event = InstallFinished(request_id="r", cluster="c", status=status, at="2026-01-01T00:00:00+00:00",
                            nodes_changed=nodes_changed, kind="invalid" if status == "Failed" else None)
    assert replaceable_after(event) is replaceable
