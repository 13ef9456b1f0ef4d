"""Cluster health through the API (real clusters): every registered Node Ready, the CNI's
DaemonSet and CoreDNS's Deployment ready. The decisions are pure functions of API objects as
the API serves them (JSON); `ApiHealthWork` is the health phase's local part, run after every
node's agent has answered its health command.

What "ready" means, read against upstream (kubernetes/kubernetes, release-1.31 to master):
- a Node: its `Ready` condition is "True" (k8s.io/api core/v1 types.go, NodeConditionType
  NodeReady; `kubectl get nodes` STATUS reads the same condition);
- a DaemonSet: the controller has seen the current spec (`observedGeneration >=
  metadata.generation`) and every scheduled pod is updated and available
  (`updatedNumberScheduled == numberAvailable == desiredNumberScheduled`), as `kubectl rollout
  status` decides it (staging/src/k8s.io/kubectl/pkg/polymorphichelpers/rollout_status.go,
  DaemonSetStatusViewer);
- a Deployment: observed the current spec, `updatedReplicas` and `availableReplicas` reach
  `spec.replicas` and no old replica is left (`status.replicas == updatedReplicas`) (same file,
  DeploymentStatusViewer).
One deliberate difference: a DaemonSet with no pod scheduled is "done" for kubectl and not
ready here, since every registered node must run the CNI.

The lab has no apiserver: there, node health is each node's kubelet /healthz through its agent
(the health phase's commands) and this part has nothing to check.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, Protocol

from redis.asyncio import Redis

from bke.core.plan import Plan
from bke.core.spec.addons import addon_steps
from bke.adapters.state.keys.dispatcher import phase_key

from bke.adapters.cluster_api.workloads import Workload, daemonset_ready, observed
from bke.adapters.runner import DONE, Outcome

__all__ = [
    "ApiHealthWork",
    "ClusterObjects",
    "WORKLOAD_TIMEOUT_S",
    "Workload",
    "daemonset_ready",
    "deployment_ready",
    "health_doc",
    "health_verdict",
    "node_ready",
    "periodic_doc",
    "read_objects",
    "workloads",
]

WORKLOAD_TIMEOUT_S = 600.0  # images pulled on thousands of nodes: minutes, not seconds
WAITING_SINCE = "apiWaitingSince"




def workloads(plan: Plan) -> list[Workload]:
    """The built-in workloads the cluster must run: the CNI (calico-node, as calico's manifest
    names its DaemonSet) and CoreDNS (the Deployment `coredns`, as kubeadm names it), when on."""
    out = []
    on = {s.name for s in addon_steps(plan.spec)}  # the addon table: built-ins are on unless switched off
    if plan.spec.config.cni == "calico" and "calico" in on:
        out.append(Workload("DaemonSet", "kube-system", "calico-node"))
    if "coredns" in on:
        out.append(Workload("Deployment", "kube-system", "coredns"))
    return out


def node_ready(node: dict[str, Any]) -> bool:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False




def deployment_ready(dep: dict[str, Any]) -> tuple[bool, str]:
    st = dep.get("status") or {}
    want = int((dep.get("spec") or {}).get("replicas", 1) or 0)
    updated, available = int(st.get("updatedReplicas") or 0), int(st.get("availableReplicas") or 0)
    total = int(st.get("replicas") or 0)
    if not observed(dep):
        return False, "its controller has not seen the current spec yet"
    if updated < want or available < want:
        return False, f"{available}/{want} replicas available, {updated}/{want} updated"
    if total > updated:
        return False, f"{total - updated} old replica(s) pending termination"
    return True, f"{available}/{want} replicas available"


@dataclass(frozen=True)
class Verdict:
    ready: bool
    reason: str  # what is not ready yet, or "" when everything is
    not_ready_nodes: list[str]


def health_verdict(plan: Plan, nodes: dict[str, dict[str, Any]], objects: dict[str, dict[str, Any] | None]) -> Verdict:
    """`nodes`: Node objects by name; `objects`: workload ref -> its object (None: not found)."""
    registered = [n.hostname for n in plan.nodes if n.registers]
    not_ready = [h for h in registered if h not in nodes or not node_ready(nodes[h])]
    parts = []
    if not_ready:
        shown = ", ".join(not_ready[:10]) + (f" and {len(not_ready) - 10} more" if len(not_ready) > 10 else "")
        parts.append(f"{len(registered) - len(not_ready)}/{len(registered)} nodes Ready (not Ready: {shown})")
    for w in workloads(plan):
        obj = objects.get(w.ref)
        if obj is None:
            parts.append(f"{w.ref}: not found")
            continue
        ok, why = daemonset_ready(obj) if w.kind == "DaemonSet" else deployment_ready(obj)
        if not ok:
            parts.append(f"{w.ref}: {why}")
    return Verdict(not parts, "; ".join(parts), not_ready)


def health_doc(plan: Plan, nodes: dict[str, dict[str, Any]], objects: dict[str, dict[str, Any] | None]) -> dict[str, Any]:
    """The periodic health's API record (beside kube-system's pods): nodes Ready, workloads."""
    verdict = health_verdict(plan, nodes, objects)
    registered = sum(1 for n in plan.nodes if n.registers)
    out: dict[str, Any] = {"nodesReady": registered - len(verdict.not_ready_nodes), "nodesRegistered": registered,
                           "notReady": verdict.not_ready_nodes[:50], "workloads": {}}
    for w in workloads(plan):
        obj = objects.get(w.ref)
        ok, why = (False, "not found") if obj is None else (daemonset_ready(obj) if w.kind == "DaemonSet" else deployment_ready(obj))
        out["workloads"][w.ref] = {"ready": ok, "reason": why}
    return out


class ClusterObjects(Protocol):
    async def nodes(self, plan: Plan) -> dict[str, dict[str, Any]]: ...

    async def workload(self, plan: Plan, w: Workload) -> dict[str, Any] | None: ...


async def read_objects(plan: Plan, api: ClusterObjects) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any] | None]]:
    return await api.nodes(plan), {w.ref: await api.workload(plan, w) for w in workloads(plan)}


async def periodic_doc(plan: Plan, api: ClusterObjects) -> dict[str, Any]:
    """For the periodic health (real clusters): `health_doc` of what the API says now."""
    return health_doc(plan, *await read_objects(plan, api))


class ApiHealthWork:
    """The health phase's API part: waits (with a deadline from its first wait, kept in the
    phase's record) until `health_verdict` says ready. `api` None (the lab): nothing to check."""

    def __init__(self, redis: Redis, api: ClusterObjects | None, now: Callable[[], datetime],
                 timeout_s: float = WORKLOAD_TIMEOUT_S):
        self.redis, self.api, self.now, self.timeout_s = redis, api, now, timeout_s

    async def run(self, name: str, plan: Plan) -> Outcome:
        if self.api is None:
            return DONE
        verdict = health_verdict(plan, *await read_objects(plan, self.api))
        pkey = phase_key(plan.cluster, name)
        if verdict.ready:
            await self.redis.hdel(pkey, WAITING_SINCE)
            return DONE
        now = self.now()
        await self.redis.hsetnx(pkey, WAITING_SINCE, now.isoformat())
        raw = await self.redis.hget(pkey, WAITING_SINCE)
        since = datetime.fromisoformat(raw.decode() if isinstance(raw, bytes) else (raw or now.isoformat()))
        if (now - since).total_seconds() > self.timeout_s:
            await self.redis.hdel(pkey, WAITING_SINCE)
            node = verdict.not_ready_nodes[0] if verdict.not_ready_nodes else None
            return Outcome("failed", node=node, reason=f"not healthy after {self.timeout_s:g}s: {verdict.reason}")
        return Outcome("wait", delay=5.0, reason=verdict.reason)
