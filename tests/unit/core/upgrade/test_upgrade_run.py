"""The running upgrade's pure core (bke.core.upgrade.run): which decision comes next, how answers are
folded, what a failure or a rollback does, and that a re-run of any pass is harmless."""
from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from bke.core.upgrade import change_of, expand_order, resolve_target
from bke.core.upgrade.run import (
    UpgradeRun,
    awaited_ids,
    decide,
    finish,
    fold_results,
    is_upgrade_command,
    mark_drained,
    mark_local,
    mark_sent,
    mark_uncordoned,
    new_run,
    upgrade_command_id,
)

from ...upgrade_helpers import SPLIT, plan_of

OK = {"status": "Succeeded", "step": "", "stderr": ""}


def _run(max_unavailable: str | None = None, left_out: tuple[str, ...] = ()) -> UpgradeRun:
    p = plan_of(SPLIT)
    t = resolve_target(p, "1.34.1", "3.5.21")
    order = expand_order(p, change_of(p, t), max_unavailable, left_out)
    return new_run("r1", p.cluster, {"kubernetes": "1.33.2", "etcd": "3.5.1", "containerd": "2.1.1"},
                   {"kubernetes": "1.34.1", "etcd": "3.5.21", "containerd": "2.1.1"}, order,
                   [n.hostname for n in p.nodes], "t0", left_out=list(left_out))


def _answer_all(run: UpgradeRun, results: dict, status: dict = OK) -> None:
    step = run.step_now()
    assert step is not None
    for h in step.current():
        results[upgrade_command_id(run.cluster, run.request_id, step.name, step.group, h)] = status


def _drive(run: UpgradeRun, results: dict, fail_at: tuple[str, str] | None = None) -> list[tuple[str, str, tuple[str, ...]]]:
    """Carry out every decision as the adapters would, answering each command; the decisions seen."""
    seen = []
    for _ in range(10_000):
        fold_results(run, results)
        d = decide(run)
        seen.append((d.action, d.step.name if d.step else "", d.hosts))
        if d.action in ("succeed", "fail"):
            finish(run, d.action == "succeed", "t1", d.reason)
            return seen
        if d.action == "done":
            return seen
        assert d.step is not None
        if d.action == "local":
            mark_local(d.step, True)
        elif d.action == "drain":
            mark_drained(d.step)
        elif d.action == "uncordon":
            mark_uncordoned(d.step)
        elif d.action == "send":
            mark_sent(d.step, 0.0)
        elif d.action == "wait":
            bad = fail_at is not None and d.step.name == fail_at[0] and fail_at[1] in d.hosts
            answer = {"status": "Failed", "step": "replace:kube-apiserver",
                      "stderr": "rolled back /etc/kubernetes/manifests/kube-apiserver.yaml: not healthy within 30s"}
            for h in d.hosts:
                cid = upgrade_command_id(run.cluster, run.request_id, d.step.name, d.step.group, h)
                results[cid] = answer if bad and h == fail_at[1] else OK  # type: ignore[index]
    raise AssertionError("no end")


def test_a_whole_upgrade_goes_step_by_step_in_the_order_table_and_succeeds():
    run = _run()
    seen = _drive(run, {})
    assert run.status == "Succeeded"
    sent = [(name, hosts) for action, name, hosts in seen if action == "send"]
    names = list(dict.fromkeys(n for n, _ in sent))
    assert names == ["agents", "etcd-snapshots", "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler",
                     "masters-runtime", "workers", "post-checks"]
    # etcd member by member, control plane one node at a time
    assert all(len(h) == 1 for n, h in sent if n in ("etcd", "kube-apiserver", "masters-runtime"))
    # every drain step batch: drain, then send, then uncordon, in that order
    drains = [(a, h) for a, n, h in seen if n == "workers" and a in ("drain", "send", "uncordon")]
    assert [a for a, _ in drains][:3] == ["drain", "send", "uncordon"]
    assert all(s.status == "Succeeded" for s in run.steps)


def test_a_rolled_back_node_stops_the_upgrade_and_no_later_node_gets_a_command():
    run = _run()
    p = plan_of(SPLIT)
    second = p.nodes_running("kube-apiserver")[1].hostname
    seen = _drive(run, {}, fail_at=("kube-apiserver", second))
    assert run.status == "Failed"
    assert f"node {second} rolled back at step replace:kube-apiserver" in run.message
    assert run.failed[0].status == "RolledBack" and run.failed[0].hostname == second
    sent = [(n, h) for a, n, h in seen if a == "send"]
    apiservers = [h[0] for n, h in sent if n == "kube-apiserver"]
    assert apiservers[-1] == second  # nothing after the failed node, in that step or any later one
    assert not [n for n, _ in sent if n in ("kube-controller-manager", "kube-scheduler", "masters-runtime", "workers")]


def test_a_batch_waits_for_every_node_before_it_ends():
    run = _run(max_unavailable="100%")
    results: dict = {}
    while (d := decide(run)).action != "send" or d.step.name != "workers":  # type: ignore[union-attr]
        fold_results(run, results)
        d = decide(run)
        if d.action == "local":
            mark_local(d.step, True)  # type: ignore[arg-type]
        elif d.action == "drain":
            mark_drained(d.step)  # type: ignore[arg-type]
        elif d.action == "uncordon":
            mark_uncordoned(d.step)  # type: ignore[arg-type]
        elif d.action == "send":
            if d.step.name == "workers":  # type: ignore[union-attr]
                break
            mark_sent(d.step, 0.0)  # type: ignore[arg-type]
        elif d.action == "wait":
            _answer_all(run, results)
    d = decide(run)
    assert d.action == "send" and len(d.hosts) > 1
    mark_sent(d.step, 0.0)  # type: ignore[arg-type]
    first = d.hosts[0]
    results[upgrade_command_id(run.cluster, "r1", "workers", "", first)] = OK
    assert not fold_results(run, results) and decide(run).action == "wait"
    _answer_all(run, results)
    assert fold_results(run, results) and decide(run).action == "uncordon"


def test_a_silent_node_fails_the_batch_after_the_answer_deadline_only():
    run = _run()
    d = decide(run)
    mark_local(d.step, True)  # type: ignore[arg-type]
    d = decide(run)
    assert d.action == "send" and d.step.name == "agents"  # type: ignore[union-attr]
    mark_sent(d.step, 1000.0)  # type: ignore[arg-type]
    assert not fold_results(run, {}, now_s=1500.0, answer_deadline_s=900.0)
    assert fold_results(run, {}, now_s=1901.0, answer_deadline_s=900.0)
    d = decide(run)
    assert d.action == "fail" and "no answer within 900s" in d.reason


def test_re_deciding_without_new_facts_repeats_the_same_decision_and_folding_twice_counts_once():
    run = _run()
    mark_local(decide(run).step, True)  # type: ignore[arg-type]
    d1, d2 = decide(run), decide(run)
    assert d1 == d2 and d1.action == "send"
    mark_sent(d1.step, 0.0)  # type: ignore[arg-type]
    results: dict = {}
    _answer_all(run, results)
    assert fold_results(run, results)
    done, batch = run.steps[1].done, run.steps[1].batch
    mark_sent(run.steps[1], 0.0)  # the next batch is sent; the old answers are folded again
    assert not fold_results(run, results)
    assert (run.steps[1].done, run.steps[1].batch) == (done, batch)


def test_the_record_survives_json_and_command_ids_are_recognised():
    run = _run()
    again = UpgradeRun.from_json(run.to_json())
    assert again == run and json.loads(run.to_json())["schema_version"] == 1
    cid = upgrade_command_id("c1", "r1", "etcd", "etcd-events", "m1")
    assert cid == "c1/upgrade@r1@etcd.etcd-events/m1/0" and is_upgrade_command(cid)
    assert not is_upgrade_command("c1/node-env/m1/0") and not is_upgrade_command("c1/rotate@x/m1/0")


@pytest.mark.parametrize("left", [1, 2])
def test_left_out_nodes_get_no_command_at_all(left):
    p = plan_of(SPLIT)
    workers = [n.hostname for n in p.nodes if not n.roles or n.roles == ["node"]][:left] or [p.nodes[-1].hostname]
    run = _run(left_out=tuple(workers))
    seen = _drive(run, {})
    assert run.status == "Succeeded" and run.left_out == sorted(workers)
    assert not any(set(h) & set(workers) for a, _, h in seen if a == "send")


def test_an_agent_of_another_version_fails_the_agents_step_naming_both_versions():
    p = plan_of(SPLIT)
    t = resolve_target(p, "1.34.1", "3.5.21")
    run = new_run("r1", p.cluster, {}, {}, expand_order(p, change_of(p, t)), [n.hostname for n in p.nodes], "t0",
                  agent_version="0.2.0")
    mark_local(decide(run).step, True)  # type: ignore[arg-type]
    d = decide(run)
    assert d.step is not None and d.step.name == "agents"
    mark_sent(d.step, 0.0)
    cid = upgrade_command_id(run.cluster, "r1", "agents", "", d.hosts[0])
    assert fold_results(run, {cid: {**OK, "agentVersion": "0.2.0"}})  # the right version passes
    d = decide(run)
    mark_sent(d.step, 0.0)  # type: ignore[arg-type]
    cid = upgrade_command_id(run.cluster, "r1", "agents", "", d.hosts[0])
    assert fold_results(run, {cid: {**OK, "agentVersion": "0.1.0"}})
    d = decide(run)
    assert d.action == "fail" and "the agent runs 0.1.0, this BKE ships 0.2.0" in d.reason
    assert run.failed[0].failed_step == "agent-version"


def test_folding_only_the_awaited_answers_takes_the_same_decisions_as_folding_them_all():
    """The upgrader reads just `awaited_ids` (the current batch's, once sent) from the results hash."""
    every, only = _run("40%"), _run("40%")
    seen_all = _drive(every, {})
    answers: dict = {}
    seen_only = []
    for _ in range(10_000):  # _drive's loop, folding only what the adapter reads
        fold_results(only, {k: answers[k] for k in awaited_ids(only) if k in answers})
        d = decide(only)
        seen_only.append((d.action, d.step.name if d.step else "", d.hosts))
        if d.action == "succeed":
            break
        assert d.step is not None
        if d.action == "wait":
            assert awaited_ids(only) == [upgrade_command_id(only.cluster, "r1", d.step.name, d.step.group, h) for h in d.hosts]
            _answer_all(only, answers)
        else:
            assert awaited_ids(only) == []  # nothing sent and unanswered
            {"local": lambda s: mark_local(s, True), "drain": mark_drained, "uncordon": mark_uncordoned,
             "send": lambda s: mark_sent(s, 0.0)}[d.action](d.step)
    assert seen_only == seen_all and only.status == "Running" and all(s.status == "Succeeded" for s in only.steps)


def test_the_record_as_json_is_the_dataclasses_as_dicts():
    run = _run()
    _drive(run, {})
    assert run.to_json() == json.dumps(asdict(run), separators=(",", ":"))
