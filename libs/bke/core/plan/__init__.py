"""Placement plan: models (a contract) and the pure placement core."""
from .models import COMPONENTS, ETCD_CLUSTERS, ApiserverEtcd, EtcdClusterPlan, EtcdMember, NodePlan, Plan, Taint
from .outcome import PlanOutcome, plan_spec_text
from .placement import ETCD_LAYOUT, build_plan, format_overrides, parse_overrides

__all__ = [
    "COMPONENTS",
    "ETCD_CLUSTERS",
    "ETCD_LAYOUT",
    "ApiserverEtcd",
    "EtcdClusterPlan",
    "EtcdMember",
    "NodePlan",
    "Plan",
    "PlanOutcome",
    "plan_spec_text",
    "Taint",
    "build_plan",
    "format_overrides",
    "parse_overrides",
]
