"""Nodes an upgrade leaves behind, and their retry: bke.core.upgrade.node_versions and bke.core.upgrade.retry.

Per node, a finished run records what its components run; `decide_retry` completes the upgrade
for named nodes that are behind, with the same order and batches restricted to them, and
refuses a node that is not behind, naming what it runs."""
from __future__ import annotations

import pytest

from bke.core.spec.roles import is_master
from bke.core.upgrade import change_of, expand_order, resolve_target
from bke.core.upgrade.node_versions import NodeVersion, settled, stopped_batch_ids
from bke.core.upgrade.retry import RetryPlan, decide_retry, retry_run
from bke.core.upgrade.run import UpgradeRun, new_run, upgrade_command_id
from bke.core.upgrade.run_request import UpgradeRequest

from tests.unit.core.upgrade.test_upgrade_run import _drive
from ...upgrade_helpers import SPLIT, plan_of

FROM = {"kubernetes": "1.33.2", "etcd": "3.5.1", "containerd": "2.1.1"}
TO = {"kubernetes": "1.34.1", "etcd": "3.5.21", "containerd": "2.1.1"}


def _plan():  # type: ignore[no-untyped-def]
    return plan_of(SPLIT)


def _workers(p) -> list[str]:  # type: ignore[no-untyped-def]
    return [n.hostname for n in p.nodes if n.registers and not is_master(n.roles)]


def _run(left_out: tuple[str, ...] = (), rid: str = "r1") -> UpgradeRun:
    p = _plan()
    t = resolve_target(p, "1.34.1", "3.5.21")
    return new_run(rid, p.cluster, FROM, TO, expand_order(p, change_of(p, t), None, left_out),
                   [n.hostname for n in p.nodes], "t0", left_out=list(left_out),
                   request=UpgradeRequest(request_id=rid, cluster=p.cluster, kubernetes_version=TO["kubernetes"],
                                          max_unavailable=None, drain_timeout_s=300.0))


def test_a_succeeded_run_puts_every_node_on_the_target_but_the_left_out_one():
    p = _plan()
    left = _workers(p)[0]
    run = _run((left,))
    _drive(run, {})
    assert run.status == "Succeeded"
    nodes = settled(run, {}, {})
    assert set(nodes) == {n.hostname for n in p.nodes}
    assert all(v.version == TO and not v.behind for h, v in nodes.items() if h != left)
    lv = nodes[left]
    assert lv.behind and lv.version == FROM and lv.target == TO and "left out" in lv.why
    assert NodeVersion.from_json(lv.to_json()) == lv


def test_a_rolled_back_node_and_the_nodes_not_reached_stay_behind_the_others_do_not():
    p = _plan()
    apis = [n.hostname for n in p.nodes_running("kube-apiserver")]
    run = _run()
    results: dict = {}
    _drive(run, results, fail_at=("kube-apiserver", apis[1]))
    assert run.status == "Failed"
    ids = stopped_batch_ids(run)
    assert ids == [upgrade_command_id(run.cluster, "r1", "kube-apiserver", "", apis[1])]
    nodes = settled(run, {k: results[k] for k in ids}, {})
    bad = nodes[apis[1]]
    assert bad.behind and bad.why == "rolled back at kube-apiserver (replace:kube-apiserver)"
    assert "kube-apiserver" not in bad.done
    # every node is behind: none had its runtime replaced, and the upgrade stopped before
    assert all(v.behind for v in nodes.values())
    first = nodes[apis[0]]
    assert "kube-apiserver" in first.done and first.why == "not reached: the upgrade stopped at kube-apiserver"
    assert nodes[_workers(p)[0]].done == []


def test_a_failed_batch_s_other_nodes_are_done_by_their_own_answers():
    p = _plan()
    workers = _workers(p)
    run = new_run("r1", p.cluster, FROM, {**FROM, "containerd": "2.2.0"},
                  expand_order(p, change_of(p, resolve_target(p, "1.33.2", "3.5.1", "2.2.0")), "100%"),
                  [n.hostname for n in p.nodes], "t0")
    results: dict = {}
    _drive(run, results, fail_at=("workers", workers[0]))
    ids = stopped_batch_ids(run)
    assert len(ids) == len(workers)
    nodes = settled(run, {k: results[k] for k in ids}, {})
    assert nodes[workers[0]].behind and all(not nodes[w].behind for w in workers[1:])


def test_an_entry_left_by_an_earlier_run_keeps_its_versions_while_still_behind():
    p = _plan()
    left = _workers(p)[0]
    run = _run((left,), rid="r2")
    _drive(run, {})
    older = NodeVersion(version={"kubernetes": "1.32.5", "etcd": "3.5.1", "containerd": "2.1.1"}, request_id="r1",
                        target=FROM, why="left out")
    assert settled(run, {}, {left: older})[left].version == older.version


def _behind(run: UpgradeRun) -> dict[str, NodeVersion]:
    _drive(run, {})
    return settled(run, {}, {})


def test_a_retry_of_a_left_out_node_serves_only_it_with_the_same_order():
    p = _plan()
    left = _workers(p)[0]
    last = _run((left,))
    versions = _behind(last)
    known = {n.hostname for n in p.nodes}
    decided = decide_retry(last, versions, [left], known, known, p.cluster)
    assert isinstance(decided, RetryPlan)
    assert decided.nodes == (left,) and decided.current == FROM and decided.target == TO
    assert not decided.addons  # the upgrade applied them already
    run = retry_run(last, p, decided, "r2", "t5")
    assert run.retry_of == "r1" and run.request is not None and run.request.nodes == [left] and run.current == FROM
    batches = {h for s in run.steps for b in s.batches for h in b}
    assert batches == {left}
    assert [s.name for s in run.steps] == ["pre-checks", "agents", "workers", "post-checks"]
    seen = _drive(run, {})
    assert run.status == "Succeeded"
    assert {h for a, _, hs in seen if a == "send" for h in hs} == {left}
    assert settled(run, {}, versions)[left].version == TO and not settled(run, {}, versions)[left].behind


def test_default_retries_every_node_behind_and_a_failed_upgrade_s_retry_of_all_runs_the_addons():
    p = _plan()
    apis = [n.hostname for n in p.nodes_running("kube-apiserver")]
    last = _run()
    _drive(last, {}, fail_at=("kube-apiserver", apis[1]))
    versions = settled(last, {}, {})
    known = {n.hostname for n in p.nodes}
    decided = decide_retry(last, versions, [], known, known, p.cluster)
    assert isinstance(decided, RetryPlan) and set(decided.nodes) == known and decided.addons
    assert "addons" in [s.name for s in retry_run(last, p, decided, "r2", "t5").steps]
    # only the rolled-back node: the cluster stays mixed, so no addons of the new version
    one = decide_retry(last, versions, [apis[1]], known, known, p.cluster)
    assert isinstance(one, RetryPlan) and not one.addons and not one.covers_all_behind
    run = retry_run(last, p, one, "r3", "t5")
    assert "addons" not in [s.name for s in run.steps]
    assert {h for s in run.steps for b in s.batches for h in b} == {apis[1]}


@pytest.mark.parametrize(("case", "expect"), [
    ("none", "no upgrade to retry"),
    ("running", "is still running"),
    ("unknown", "--nodes: unknown node(s) nope"),
    ("ahead", "not behind, nothing to retry on them: {ahead} runs kubernetes 1.34.1, etcd 3.5.21, containerd 2.1.1"),
    ("dead", "--nodes: no live agent on {left}"),
    ("nothing", "no node of big is behind"),
])
def test_a_retry_is_refused_with_its_reason(case: str, expect: str):
    p = _plan()
    left = _workers(p)[0]
    ahead = _workers(p)[1]
    known = {n.hostname for n in p.nodes}
    last: UpgradeRun | None = _run(() if case == "nothing" else (left,))
    assert last is not None
    versions = _behind(last) if case != "running" else {}
    nodes, alive = [left], known
    if case == "none":
        last = None
    elif case == "running":
        last = _run((left,))
    elif case == "unknown":
        nodes = ["nope", left]
    elif case == "ahead":
        nodes = [left, ahead]
    elif case == "dead":
        alive = known - {left}
    elif case == "nothing":
        nodes = []
    got = decide_retry(last, versions, nodes, known, alive, p.cluster)
    assert isinstance(got, str) and expect.format(ahead=ahead, left=left) in got, got
