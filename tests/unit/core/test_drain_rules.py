"""kubectl drain's rules as bke.core.drain applies them: which pods are evicted, left or refused,
what the refusal and timeout messages name, and the budget's words read from a 429 answer."""
from __future__ import annotations

import itertools
import json

import pytest

from bke.contracts.drain import DrainOptions
from bke.core.drain import (PodFacts, Verdict, backoff_delays, blocking_budget, judge, refusal_message,
                            select_pods, timeout_message)

RS, DS = "ReplicaSet", "DaemonSet"
NONE = DrainOptions()
FORCE = DrainOptions(force=True)
EMPTYDIR = DrainOptions(delete_emptydir_data=True)
BOTH = DrainOptions(force=True, delete_emptydir_data=True)


def pod(name: str, **kw) -> PodFacts:
    return PodFacts(namespace="default", name=name, **kw)


@pytest.mark.parametrize(("facts", "opts", "verdict"), [
    (pod("web", controller_kind=RS), NONE, Verdict.EVICT),
    (pod("ds", controller_kind=DS), NONE, Verdict.LEAVE),
    (pod("ds-forced", controller_kind=DS), BOTH, Verdict.LEAVE),  # --force never evicts a DaemonSet's pod
    (pod("mirror", mirror=True, controller_kind="Node"), NONE, Verdict.LEAVE),
    (pod("bare"), NONE, Verdict.REFUSE),
    (pod("bare"), FORCE, Verdict.EVICT),
    (pod("bare"), EMPTYDIR, Verdict.REFUSE),
    (pod("cache", controller_kind=RS, emptydir=True), NONE, Verdict.REFUSE),
    (pod("cache", controller_kind=RS, emptydir=True), FORCE, Verdict.REFUSE),  # --force does not cover emptyDir
    (pod("cache", controller_kind=RS, emptydir=True), EMPTYDIR, Verdict.EVICT),
    (pod("bare-cache", emptydir=True), EMPTYDIR, Verdict.REFUSE),
    (pod("bare-cache", emptydir=True), BOTH, Verdict.EVICT),
    (pod("job-done", phase="Succeeded"), NONE, Verdict.EVICT),  # a finished pod goes whatever else it is
    (pod("crashed", phase="Failed", emptydir=True), NONE, Verdict.EVICT),
    (pod("ds-done", phase="Succeeded", controller_kind=DS), NONE, Verdict.EVICT),
])
def test_each_pod_is_judged_by_kubectls_rules(facts: PodFacts, opts: DrainOptions, verdict: Verdict) -> None:
    assert judge(facts, opts)[0] is verdict


def test_a_refused_pod_names_the_option_that_would_allow_it() -> None:
    assert judge(pod("bare"), NONE) == (Verdict.REFUSE, "has no controller (force)")
    assert judge(pod("c", controller_kind=RS, emptydir=True), NONE) == (Verdict.REFUSE, "uses emptyDir (delete-emptydir-data)")


def test_selection_splits_the_pods_and_the_refusal_names_every_refused_pod_sorted() -> None:
    pods = [pod("web", controller_kind=RS), pod("zeta"), pod("ds", controller_kind=DS),
            pod("alpha", controller_kind=RS, emptydir=True)]
    chosen = select_pods(pods, NONE)
    assert [p.name for p in chosen.evict] == ["web"]
    assert [p.name for p, _ in chosen.left] == ["ds"]
    assert [p.name for p, _ in chosen.refused] == ["zeta", "alpha"]
    msg = refusal_message("worker1", chosen.refused)
    assert msg.startswith("node worker1: drain refused, nothing evicted: 2 pod(s)")
    assert msg.index("default/alpha uses emptyDir") < msg.index("default/zeta has no controller")


def test_long_lists_name_ten_then_count() -> None:
    msg = timeout_message("w", 30, [f"ns/p{i:02d}" for i in range(25)], {})
    assert "ns/p09" in msg and "ns/p10" not in msg and "and 15 more" in msg and "25 pod(s) left" in msg


def test_a_timeout_names_the_pods_left_and_the_budgets_that_blocked_them() -> None:
    msg = timeout_message("worker2", 10, ["default/web-1"], {"default/web-1": "The disruption budget web needs 2 healthy pods and has 2 currently"})
    assert msg == ("node worker2: drain not done within 10s: 1 pod(s) left: default/web-1; blocked by default/web-1: "
                   "The disruption budget web needs 2 healthy pods and has 2 currently")


def test_the_budget_is_read_from_the_eviction_apis_429_status() -> None:
    status = {"kind": "Status", "status": "Failure", "reason": "TooManyRequests", "code": 429,
              "message": "Cannot evict pod as it would violate the pod's disruption budget.",
              "details": {"causes": [{"reason": "FieldValueInvalid", "message": "not this one"},
                                     {"reason": "DisruptionBudget",
                                      "message": "The disruption budget web needs 3 healthy pods and has 3 currently"}]}}
    assert blocking_budget(json.dumps(status)) == "The disruption budget web needs 3 healthy pods and has 3 currently"
    del status["details"]
    assert blocking_budget(json.dumps(status).encode()) == "Cannot evict pod as it would violate the pod's disruption budget."
    assert blocking_budget("not json") == "" and blocking_budget(None) == "" and blocking_budget("[1]") == ""


def test_backoff_starts_quick_and_settles_at_kubectls_pace() -> None:
    assert list(itertools.islice(backoff_delays(), 7)) == [0.25, 0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
