"""The lab's applier for the `addons` phase: no apiserver, so every object is validated strictly
for the cluster's Kubernetes version and nothing is applied (bke.adapters.cluster_api.addons)."""
from __future__ import annotations

from typing import Any

from bke.adapters.cluster_api.addons import AddonApplied, validate_objects
from bke.contracts.statuses import AddonStatus
from bke.core.plan import Plan

__all__ = ["LabApplier"]


class LabApplier:
    """Validate every object strictly for the cluster's Kubernetes version; apply nothing."""

    validates = True

    async def apply(self, plan: Plan, name: str, objects: list[dict[str, Any]], credential: str = "admin") -> AddonApplied:
        validate_objects(plan, objects)
        return AddonApplied(AddonStatus.VALIDATED)  # nothing applied, so nothing to prune

    async def workload(self, plan: Plan, kind: str, namespace: str, name: str) -> dict[str, Any]:
        raise NotImplementedError("the lab records addons as validated; nothing runs to wait for")
