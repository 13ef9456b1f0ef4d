"""The upgrader's step tables (bke_upgrader.carriers, bke.core.upgrade.node_commands): every step
kind a run can hold has its carrier, a local step its own and a node step the batch's; every
node step but the membership and snapshot ones has a row of the node commands; and every step
the order tables name is a kind."""
from __future__ import annotations

from bke.core.lifecycle.apply_members import MEMBER_NODE_STEPS
from bke.core.lifecycle.apply_steps import APPLY_STEPS, MEMBERSHIP
from bke.core.upgrade.node_commands import NODE_COMMANDS
from bke.core.upgrade.order import ORDER
from bke.core.upgrade.steps import LOCAL_STEPS, NODE_STEPS, StepKind, step_kind
from bke_upgrader.batches import COMMANDS, node_batch
from bke_upgrader.carriers import CARRIERS


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
