"""Workloads BKE waits for through the cluster's API, and when one counts as ready."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Workload", "daemonset_ready", "observed", "rollout_mark"]


@dataclass(frozen=True)
class Workload:
    kind: str  # "DaemonSet" | "Deployment"
    namespace: str
    name: str

    @property
    def ref(self) -> str:
        return f"{self.kind.lower()}/{self.namespace}/{self.name}"


def observed(obj: dict[str, Any]) -> bool:
    return int((obj.get("status") or {}).get("observedGeneration") or 0) >= int((obj.get("metadata") or {}).get("generation") or 0)


def rollout_mark(workload: dict[str, Any]) -> str:
    """What changes while a rollout makes progress: the generation seen and the pods updated,
    ready and available (a DaemonSet's or a Deployment's counts)."""
    st = workload.get("status") or {}
    keys = ("observedGeneration", "updatedNumberScheduled", "numberReady", "numberAvailable",
            "updatedReplicas", "readyReplicas", "availableReplicas")
    return "/".join(str(int(st.get(k) or 0)) for k in keys)


def daemonset_ready(ds: dict[str, Any]) -> tuple[bool, str]:
    st = ds.get("status") or {}
    desired = int(st.get("desiredNumberScheduled") or 0)
    updated, available = int(st.get("updatedNumberScheduled") or 0), int(st.get("numberAvailable") or 0)
    if not observed(ds):
        return False, "its controller has not seen the current spec yet"
    if desired == 0:
        return False, "no pod scheduled yet"
    if updated < desired or available < desired:
        return False, f"{available}/{desired} pods available, {updated}/{desired} updated"
    return True, f"{available}/{desired} pods available"
