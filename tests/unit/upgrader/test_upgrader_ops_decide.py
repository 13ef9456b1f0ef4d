"""The upgrader's operations read through the one loop's decisions (bke_upgrader.ops.*.decide,
pure): every decision of a whole upgrade and of a whole etcd restore maps onto a Send, a
RunLocally whose action has its row in the loop's carriers table, a Wait, a Succeed or a Fail
with the run's own reason; and no two decisions in a row are equal (the loop stops a carrier
that moves nothing by that test)."""
from __future__ import annotations

from bke.core.etcdsnap.restore import STAGES, restore_plan
from bke.core.etcdsnap.restore_run import RestoreRun, fold_results, mark_local, mark_sent, new_run, restore_command_id
from bke.core.operation import Fail, RunLocally, Send, Succeed, Wait
from bke.core.upgrade.run import UpgradeRun, decide, mark_drained, mark_uncordoned
from bke.core.upgrade.run import fold_results as fold_upgrade
from bke.core.upgrade.run import mark_local as mark_step_local
from bke.core.upgrade.run import mark_sent as mark_step_sent
from bke.core.upgrade.steps import LOCAL_STEPS
from bke_upgrader.ops.restore.decide import next_step as restore_next
from bke_upgrader.ops.upgrade.decide import NODE_STAGES
from bke_upgrader.ops.upgrade.decide import next_step as upgrade_next

from ..core.upgrade.test_upgrade_run import OK, _answer_all, _run
from ..upgrade_helpers import SEED, plan_of

MASTERS = ("master1", "master2", "master3")


def _restore() -> RestoreRun:
    return new_run("r1", restore_plan(plan_of(SEED), "etcd-data", "s1"), "ab" * 32, 1056, "t0")


def test_a_restore_is_the_verify_then_one_send_per_stage_then_succeed() -> None:
    run = _restore()
    d = restore_next(run)
    assert d == RunLocally("verify-snapshot")
    mark_local(run.stages[0], True, run)
    for stage in [s.name for s in STAGES][1:]:
        d = restore_next(run)
        assert d == Send(MASTERS, stage)  # the stage's name: its row of the carriers table
        st = run.stage_now()
        assert st is not None
        mark_sent(st, 100.0)
        wait = restore_next(run)
        assert isinstance(wait, Wait) and stage in wait.reason
        answers = {restore_command_id(run.cluster, "r1", stage, h): OK for h in MASTERS}
        fold_results(run, answers, 101.0, 1800.0)
    assert restore_next(run) == Succeed()


def test_a_restore_that_failed_is_a_fail_with_its_reason() -> None:
    run = _restore()
    mark_local(run.stages[0], False, run, "its bytes do not match")
    d = restore_next(run)
    assert isinstance(d, Fail) and d.reason == "verify-snapshot failed: its bytes do not match"


def test_every_decision_of_an_upgrade_has_its_row_and_none_repeats() -> None:
    run: UpgradeRun = _run()
    rows = {*map(str, LOCAL_STEPS), *NODE_STAGES}
    seen: list[object] = []
    results: dict = {}
    for _ in range(10_000):
        d = upgrade_next(run)
        assert not seen or d != seen[-1], d
        seen.append(d)
        if isinstance(d, Succeed):
            break
        raw = decide(run)
        assert raw.step is not None
        if isinstance(d, Wait):  # every node of the batch answers
            _answer_all(run, results)
            fold_upgrade(run, results)
            continue
        assert d.action in rows and tuple(d.nodes) == tuple(raw.hosts or raw.step.current())
        if raw.action == "local":
            mark_step_local(raw.step, True)
        elif raw.action == "drain":
            mark_drained(raw.step)
        elif raw.action == "uncordon":
            mark_uncordoned(raw.step)
        else:
            assert isinstance(d, Send) and d.action == "send"
            mark_step_sent(raw.step, 0.0)
    assert isinstance(seen[-1], Succeed)
    assert {type(d) for d in seen} == {RunLocally, Send, Wait, Succeed}
