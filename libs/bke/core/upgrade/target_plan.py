"""The plan an upgrade leads to: the stored plan's own spec with the target versions, validated
and placed again exactly as the planner would (so extraArgs that the target minor no longer
accepts are refused before anything is touched, by the same flag table)."""
from __future__ import annotations

from bke.core.plan import Plan
from bke.core.plan.placement import build_plan
from bke.core.spec.validate import validate_spec
from .paths import Target

__all__ = ["TargetPlanError", "target_plan"]


class TargetPlanError(ValueError):
    """The spec does not validate at the target versions; each error names its field."""

    def __init__(self, errors: list[str]):
        super().__init__("; ".join(errors))
        self.errors = errors


def target_plan(current: Plan, target: Target) -> Plan:
    spec = current.spec
    config = spec.config.model_copy(update={
        "kubernetes_version": f"v{target.kubernetes}" if current.kubernetes_version.startswith("v") else str(target.kubernetes),
        "etcd_version": str(target.etcd),
        "containerd_version": str(target.containerd),
    })
    cc = spec.cluster.spec.cluster_config.model_copy(update={"cluster": config})
    cluster = spec.cluster.model_copy(update={"spec": spec.cluster.spec.model_copy(update={"cluster_config": cc})})
    new_spec = spec.model_copy(update={"cluster": cluster})
    report = validate_spec(new_spec)
    if report.errors:
        raise TargetPlanError([f"{e.path}: {e.message}" for e in report.errors])
    return build_plan(new_spec, report.warnings)
