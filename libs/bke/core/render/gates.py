"""The plan's versions, checked; the gates table itself lives in `bke.core.flagrules.gates` so that
spec validation (in the planner and `bke plan`) judges user flags by the same rows."""
from __future__ import annotations

from bke.core.flagrules.gates import VersionSet
from bke.core.plan import Plan
from bke.core.versions import Version, VersionError, check_supported
from .errors import UnsupportedVersionError

__all__ = ["resolve_versions"]

_C = "cluster.spec.clusterConfig.cluster"


def resolve_versions(plan: Plan) -> VersionSet:
    """Parse and check the plan's versions; all problems at once, each with its field path."""
    errors: list[tuple[str, str]] = []
    found: dict[str, Version] = {}
    for comp, field, text in (
        ("kubernetes", "kubernetesVersion", plan.kubernetes_version),
        ("etcd", "etcdVersion", plan.etcd_version),
        ("containerd", "containerdVersion", plan.containerd_version),
    ):
        try:
            found[comp] = check_supported(comp, text)
        except VersionError as exc:
            errors.append((f"{_C}.{field}", str(exc)))
    if errors:
        raise UnsupportedVersionError(errors, cluster=plan.cluster)
    return VersionSet(found["kubernetes"], found["etcd"], found["containerd"])
