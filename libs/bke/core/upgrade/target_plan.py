"""The plan an upgrade leads to: the stored plan's own spec with the target versions, validated
and placed again exactly as the planner would (so extraArgs that the target minor no longer
accepts are refused before anything is touched, by the same flag table)."""
from __future__ import annotations

from bke.core.plan import Plan
from bke.core.plan.placement import build_plan
from bke.core.spec.addons import addons_at
from bke.core.spec.validate import validate_spec
from bke.core.versions import spelled_like
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
        "kubernetes_version": spelled_like(current.kubernetes_version, target.kubernetes),
        "etcd_version": spelled_like(current.etcd_version, target.etcd),
        "containerd_version": spelled_like(current.containerd_version, target.containerd),
    })
    cc = spec.cluster.spec.cluster_config
    cc = cc.model_copy(update={"cluster": config, "addons": addons_at(spec.config, config, cc.addons)})
    cluster = spec.cluster.model_copy(update={"spec": spec.cluster.spec.model_copy(update={"cluster_config": cc})})
    new_spec = spec.model_copy(update={"cluster": cluster})
    report = validate_spec(new_spec)
    if report.errors:
        raise TargetPlanError([f"{e.path}: {e.message}" for e in report.errors])
    return build_plan(new_spec, report.warnings)
