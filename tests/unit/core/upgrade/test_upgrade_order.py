"""The upgrade order: the table's sequence, split roles, batches and a 5,000-node expansion."""
from __future__ import annotations

import time

import pytest

from bke.core.plan import plan_spec_text
from bke.core.spec.synth import synth_spec_text
from bke.core.upgrade import ORDER, Change, expand_order, parse_max_unavailable

from ...upgrade_helpers import SEED, SPLIT, plan_of

ALL = Change(kubernetes=True, etcd=True, containerd=True)


def _steps(order) -> list[tuple[str, str]]:
    return [(s.step, s.group) for s in order]


def test_the_table_is_in_skew_safe_order() -> None:
    assert [s.name for s in ORDER] == [
        "pre-checks", "agents", "etcd-snapshots", "certificates", "etcd", "kube-apiserver", "kube-controller-manager",
        "kube-scheduler", "masters-runtime", "workers", "addons", "post-checks",
    ]


def test_certificates_are_renewed_once_before_the_first_step_that_carries_them() -> None:
    renew = Change(kubernetes=True, etcd=False, containerd=False, certificates=True)
    steps = [s for s, _ in _steps(expand_order(plan_of(SEED), renew))]
    assert steps.index("certificates") == steps.index("etcd-snapshots") + 1 < steps.index("kube-apiserver")
    assert "certificates" not in [s for s, _ in _steps(expand_order(plan_of(SEED), ALL))]  # renewal off
    nothing = Change(kubernetes=False, etcd=False, containerd=False, certificates=True)
    assert "certificates" not in [s for s, _ in _steps(expand_order(plan_of(SEED), nothing))]


def test_seed_expansion() -> None:
    order = expand_order(plan_of(SEED), ALL)
    by = {(s.step, s.group): s for s in order}
    assert by[("etcd", "etcd-data")].batches == (("master1",), ("master2",), ("master3",))
    assert by[("etcd-snapshots", "etcd-data")].batches == (("master1",),)
    assert by[("kube-apiserver", "")].batches == (("master1",), ("master2",), ("master3",))
    assert by[("masters-runtime", "")].batches == (("master1",), ("master2",), ("master3",))
    assert by[("masters-runtime", "")].drain and by[("workers", "")].drain
    assert by[("workers", "")].batches == (("node1",),)
    assert by[("agents", "")].batches == (("master1",), ("master2",), ("master3",), ("node1",))  # 10% of 4 -> 1


def test_split_etcd_expansion_keeps_each_role_on_its_own_nodes() -> None:
    plan = plan_of(SPLIT)
    order = expand_order(plan, ALL)
    steps = _steps(order)
    # every etcd cluster is snapshotted before any is touched, and upgraded before any apiserver
    assert steps[2:8] == [("etcd-snapshots", c) for c in ("etcd-data", "etcd-events", "etcd-pods")] + [
        ("etcd", c) for c in ("etcd-data", "etcd-events", "etcd-pods")]
    by = {(s.step, s.group): s for s in order}
    for c in plan.etcd_clusters:
        assert by[("etcd", c.name)].batches == tuple((m.hostname,) for m in c.members)
    assert by[("kube-apiserver", "")].batches == (("m1",), ("m2",), ("m3",))
    assert by[("kube-controller-manager", "")].batches == (("m4",), ("m5",))
    assert by[("kube-scheduler", "")].batches == (("m4",), ("m5",))
    runtime = {h for b in by[("masters-runtime", "")].batches for h in b}
    workers = {h for b in by[("workers", "")].batches for h in b}
    etcd_hosts = {m.hostname for c in plan.etcd_clusters for m in c.members}
    assert etcd_hosts <= runtime and not (runtime & workers)
    assert runtime | workers == {n.hostname for n in plan.nodes}


@pytest.mark.parametrize(("change", "absent", "present"), [
    (Change(False, True, False), {"kube-apiserver", "masters-runtime", "workers", "addons"}, {"etcd", "etcd-snapshots"}),
    (Change(False, False, True), {"etcd", "etcd-snapshots", "kube-apiserver", "addons"}, {"masters-runtime", "workers"}),
    (Change(True, False, False), {"etcd"}, {"etcd-snapshots", "kube-apiserver", "workers", "addons"}),
])
def test_steps_whose_inputs_do_not_change_are_skipped(change: Change, absent: set, present: set) -> None:
    names = {s.step for s in expand_order(plan_of(SEED), change)}
    assert not (names & absent) and present <= names and {"pre-checks", "agents", "post-checks"} <= names


def test_left_out_nodes_are_in_no_batch() -> None:
    order = expand_order(plan_of(SPLIT), ALL, left_out=("m4", "worker1"))
    hosts = {h for s in order for b in s.batches for h in b}
    assert not ({"m4", "worker1"} & hosts) and {"m5", "worker2"} <= hosts


@pytest.mark.parametrize(("text", "nodes", "want"), [
    (None, 4, 1), (None, 100, 10), (None, 4991, 499), ("3", 10, 3), ("25%", 10, 2), ("1%", 10, 1),
    ("100%", 7, 7), ("50", 10, 50),
])
def test_max_unavailable(text, nodes, want) -> None:
    assert parse_max_unavailable(text, nodes) == want


@pytest.mark.parametrize("text", ["0", "0%", "101%", "-1", "ten", "5 %", ""])
def test_bad_max_unavailable_names_the_flag(text) -> None:
    with pytest.raises(ValueError, match="^--max-unavailable: "):
        expand_order(plan_of(SEED), Change(False, True, False), text)  # refused even without a worker step


@pytest.fixture(scope="module")
def big_plan():
    outcome = plan_spec_text(synth_spec_text(5000, split=True))
    assert outcome.plan is not None
    return outcome.plan


def test_5000_nodes_expand_fast_and_bounded(big_plan) -> None:
    start = time.perf_counter()
    order = expand_order(big_plan, ALL, "10%")
    elapsed = time.perf_counter() - start
    assert elapsed < 0.5, elapsed
    by = {(s.step, s.group): s for s in order}
    workers = by[("workers", "")]
    assert workers.nodes == 4991 and len(workers.batches) == 11 and max(map(len, workers.batches)) == 499
    assert by[("masters-runtime", "")].nodes == 9  # 3 masters + 6 etcd-only nodes, one at a time
    # every node gets its runtime step exactly once; steps stay a handful, not one per node
    runtime = [h for s in order if s.step in ("masters-runtime", "workers") for b in s.batches for h in b]
    assert len(runtime) == len(set(runtime)) == 5000
    # (ALL does not renew certificates: no certificates step)
    assert len(order) == len(ORDER) - 1 + 2 * (len(big_plan.etcd_clusters) - 1)
    assert sum(len(s.batches) for s in order) < 100


def test_public_surface_resolves() -> None:
    import bke.core.upgrade

    assert all(hasattr(bke.core.upgrade, name) for name in bke.core.upgrade.__all__)
