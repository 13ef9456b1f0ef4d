"""The lab's Node marker for the `node-labels` phase: no apiserver, so every registered node is
taken as registered and its marks recorded (bke.adapters.cluster_api.node_labels)."""
from __future__ import annotations

from bke.adapters.cluster_api.labels import Marks
from bke.adapters.cluster_api.node_labels import NodesApplied
from bke.contracts.statuses import MarkStatus
from bke.core.plan import NodePlan, Plan

__all__ = ["LabNodes"]


class LabNodes:
    """No apiserver: every registered node is taken as registered and its marks recorded."""

    async def mark(self, plan: Plan, batch: list[tuple[NodePlan, Marks, Marks | None]]) -> NodesApplied:
        return NodesApplied(applied={node.hostname: MarkStatus.RECORDED for node, _, _ in batch})
