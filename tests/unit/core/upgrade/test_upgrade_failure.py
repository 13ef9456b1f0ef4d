"""A pass the upgrader cannot carry out ends the run (bke.core.upgrade.failure): the reason names the
step and the node, the record says Failed, and nothing more is decided."""
from __future__ import annotations

from bke.core.errors import PermanentError
from bke.core.upgrade import change_of, expand_order, resolve_target
from bke.core.upgrade.failure import UPGRADER_STEP, abort_run, error_text
from bke.core.upgrade.run import UpgradeRun, decide, finish, mark_local, mark_sent, new_run

from ...upgrade_helpers import SPLIT, plan_of


def _run() -> UpgradeRun:
    p = plan_of(SPLIT)
    t = resolve_target(p, "1.34.1", "3.5.21")
    return new_run("r1", p.cluster, {"kubernetes": "1.33.2", "etcd": "3.5.1", "containerd": "2.1.1"},
                   {"kubernetes": "1.34.1", "etcd": "3.5.21", "containerd": "2.1.1"}, expand_order(p, change_of(p, t), "100%"),
                   [n.hostname for n in p.nodes], "t0")


def _at_agents(run: UpgradeRun) -> tuple[str, ...]:
    mark_local(decide(run).step, True)  # type: ignore[arg-type]
    d = decide(run)
    assert d.action == "send" and d.step is not None and d.step.name == "agents"
    return d.hosts


def test_a_failure_at_a_node_names_the_step_and_node_and_ends_the_run():
    run = _run()
    hosts = _at_agents(run)
    err = error_text(PermanentError("the signing key is of an unknown form"))
    reason = abort_run(run, err, "t9", node=hosts[1], hosts=hosts)
    assert reason == f"agents: node {hosts[1]}: the upgrader could not carry it out: PermanentError: the signing key is of an unknown form"
    assert (run.status, run.finished_at, run.message) == ("Failed", "t9", reason)
    step = run.steps[1]
    assert step.status == "Failed" and step.message == reason
    [node] = run.failed
    assert (node.hostname, node.status, node.step, node.failed_step) == (hosts[1], "Failed", "agents", UPGRADER_STEP)
    assert decide(run).action == "done"  # nothing further is decided, nothing sent


def test_a_failure_without_a_node_names_the_batch_and_a_finished_run_is_left_alone():
    run = _run()
    hosts = _at_agents(run)
    reason = abort_run(run, "KeyError: 'x'", "t9", hosts=hosts)
    shown = ", ".join(hosts[:5])
    assert reason.startswith(f"agents: batch of {shown}") and reason.endswith("KeyError: 'x'")
    assert f" and {len(hosts) - 5} more" in reason if len(hosts) > 5 else True
    assert run.failed == []  # no node is blamed for a batch-wide error
    assert abort_run(run, "another", "t10") == reason and run.finished_at == "t9"


def test_an_etcd_step_names_its_etcd_cluster_and_an_error_after_every_step_says_finishing():
    run = _run()
    for step in run.steps:
        if step.name == "etcd":
            break
        step.status = "Succeeded"
    first_etcd = next(s for s in run.steps if s.name == "etcd")
    reason = abort_run(run, "ValueError: no", "t9", node="e1")
    assert reason.startswith(f"etcd/{first_etcd.group}: node e1:") and first_etcd.status == "Failed"

    done = _run()
    for step in done.steps:
        step.status = "Succeeded"
    assert abort_run(done, "RuntimeError: cas", "t9") == "finishing the upgrade: RuntimeError: cas"
    assert done.status == "Failed"


def test_error_text_is_one_bounded_line():
    text = error_text(RuntimeError("a\nb   c" + "x" * 2000))
    assert text.startswith("RuntimeError: a b c") and "\n" not in text and len(text) == 500


def test_a_run_already_failed_by_an_answer_keeps_its_own_reason():
    run = _run()
    hosts = _at_agents(run)
    mark_sent(run.steps[1], 0.0)
    finish(run, False, "t5", "agents: node x rolled back")
    assert abort_run(run, "late", "t9", node=hosts[0]) == "agents: node x rolled back" and run.failed == []
