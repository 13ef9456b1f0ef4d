"""The upgrader's step tables (bke_upgrader.carriers, bke.core.upgrade.node_commands): every step
kind a run can hold has its carrier, a local step its own and a node step the batch's; every
node step but the membership and snapshot ones has a row of the node commands; every step
the order tables name is a kind; and the addons step keeps what its pass did while it waits."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from bke.core.errors import TemporaryError
from bke.core.lifecycle.apply_members import MEMBER_NODE_STEPS
from bke.core.lifecycle.apply_steps import APPLY_STEPS, MEMBERSHIP
from bke.core.upgrade.node_commands import NODE_COMMANDS
from bke.core.operation import RunStatus
from bke.core.upgrade.order import ORDER
from bke.core.upgrade.run import StepRun, UpgradeRun
from bke.core.upgrade.steps import LOCAL_STEPS, NODE_STEPS, StepKind, step_kind
from bke_upgrader.batches import COMMANDS, node_batch
from bke_upgrader.carriers import CARRIERS, Carry, carry_out


def test_every_step_kind_has_its_carrier() -> None:
    assert set(CARRIERS) == set(StepKind)
    assert all(CARRIERS[k] is node_batch for k in NODE_STEPS)
    assert all(CARRIERS[k] is not node_batch for k in LOCAL_STEPS)


def test_every_node_step_builds_its_commands() -> None:
    assert set(NODE_COMMANDS) | set(COMMANDS) == set(NODE_STEPS)
    assert not set(NODE_COMMANDS) & set(COMMANDS)
    assert set(MEMBER_NODE_STEPS) < set(COMMANDS)


def test_the_order_tables_name_step_kinds() -> None:
    assert all(isinstance(s.name, StepKind) for s in ORDER)
    assert all(step_kind(name) is not None for name in APPLY_STEPS if name != MEMBERSHIP)
    assert step_kind("no-such-step") is None and step_kind("etcd") is StepKind.ETCD


def _addons_carry(answers: list[str | Exception]) -> tuple[Carry, list[tuple[str, list[str]]]]:
    """A Carry for the addons step whose apply answers each of `answers` in turn (an exception is
    raised), recording each save and announce with the steps' statuses at that moment."""
    seen: list[tuple[str, list[str]]] = []
    run = UpgradeRun(request_id="r1", cluster="c", current={}, target={}, started_at="t0",
                     steps=[StepRun("workers", status=RunStatus.SUCCEEDED, batches=[["w1"]], batch=1),
                            StepRun("addons", batches=[["m1"]])])

    class Addons:
        async def apply(self, old: object, new: object, rendered: dict[str, str], only: str | None = None) -> str:
            answer = answers.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return answer

    async def note(what: str, r: UpgradeRun) -> None:
        seen.append((what, [s.status for s in r.steps]))

    async def renders(*args: object) -> SimpleNamespace:
        return SimpleNamespace(new_addons={})

    up = SimpleNamespace(commands=SimpleNamespace(renders=SimpleNamespace(get=renders)), api=SimpleNamespace(addons=Addons()),
                         store=SimpleNamespace(save=lambda r: note("save", r)), announce=lambda r: note("announce", r))
    return Carry(up, run, None, None, "local"), seen  # type: ignore[arg-type]


async def test_an_addons_step_that_waits_for_its_rollout_keeps_and_shows_the_steps_done_before_it() -> None:
    # the workers' last batch finished in this pass: while calico rolls out the pass ends on a
    # TemporaryError, and what it did is kept and published first (not redone every few seconds)
    c, seen = _addons_carry([TemporaryError("addon calico: 3/10 pods available", delay=5.0), ""])
    with pytest.raises(TemporaryError):
        await carry_out(c, c.run.steps[1])
    assert seen == [("save", ["Succeeded", "Pending"]), ("announce", ["Succeeded", "Pending"])]
    await carry_out(c, c.run.steps[1])  # rolled out: the step succeeds, the loop saves at the pass's end
    assert c.run.steps[1].status == RunStatus.SUCCEEDED and len(seen) == 2
    c, seen = _addons_carry(["addon calico: no progress for 601s"])
    await carry_out(c, c.run.steps[1])
    assert (c.run.steps[1].status, c.run.steps[1].message) == (RunStatus.FAILED, "addon calico: no progress for 601s")
