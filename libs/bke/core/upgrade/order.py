"""The upgrade order as a data table, and its expansion for one plan into ordered batches.

Why this order: etcd before the apiservers that use it; every kube-apiserver before any
controller-manager or scheduler, so that (with split roles) a new controller-manager never talks
to an old apiserver (Kubernetes version skew policy: kube-controller-manager and kube-scheduler
must not be newer than the apiservers they talk to); the kubelet after the control plane (it may
be older than the apiserver, never newer); masters before workers. etcd clusters go member by
member and control-plane nodes one at a time, so a failed step never costs quorum or the last
serving apiserver; workers go in batches of --max-unavailable, cordoned and drained first.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable, Iterable

from bke.core.plan import Plan
from bke.core.plan.models import NodePlan
from bke.core.spec.roles import is_master

from .steps import StepKind

__all__ = ["ORDER", "Change", "ExpandedStep", "Step", "default_max_unavailable", "expand_order", "parse_max_unavailable"]


@dataclass(frozen=True)
class Change:
    """Which versions the upgrade changes (a step whose inputs do not change is skipped)."""

    kubernetes: bool
    etcd: bool
    containerd: bool
    # the request renews certificates (UpgradeCluster.renew_certificates; kubeadm's default)
    certificates: bool = False


# How a step's nodes are grouped into batches.
ONCE = "once"  # one cluster-wide action, no node batches
PER_ETCD_CLUSTER = "per-etcd-cluster"  # one batch per etcd cluster (its first member)
MEMBER_BY_MEMBER = "member-by-member"  # each etcd cluster, one member per batch
ONE_AT_A_TIME = "one-at-a-time"
MAX_UNAVAILABLE = "max-unavailable"


@dataclass(frozen=True)
class Step:
    name: str
    summary: str
    batching: str
    nodes: Callable[[Plan], list[NodePlan]]
    run_if: Callable[[Change], bool]
    # Registered nodes are cordoned and drained first, uncordoned after; etcd-only nodes have no
    # Node object to cordon.
    drain: bool = False


def _all(p: Plan) -> list[NodePlan]:
    return list(p.nodes)


def _running(component: str) -> Callable[[Plan], list[NodePlan]]:
    return lambda p: p.nodes_running(component)


def _is_control_plane_side(n: NodePlan) -> bool:
    """Masters and etcd-only nodes (standalone kubelet, not registered): every node but workers."""
    return is_master(n.roles) or not n.registers


def _control_plane_side(p: Plan) -> list[NodePlan]:
    return [n for n in p.nodes if _is_control_plane_side(n)]


def _workers(p: Plan) -> list[NodePlan]:
    return [n for n in p.nodes if not _is_control_plane_side(n)]


def _always(c: Change) -> bool:
    return True


ORDER: tuple[Step, ...] = (
    Step(StepKind.PRE_CHECKS, "upgrade_findings on live facts; refuse or go", ONCE, _all, _always),
    Step(StepKind.AGENTS, "new agent on every node, its reported version verified", MAX_UNAVAILABLE, _all, _always),
    Step(StepKind.ETCD_SNAPSHOTS, "a snapshot of every etcd cluster, stored and listed", PER_ETCD_CLUSTER, _all,
         lambda c: c.etcd or c.kubernetes),
    # Renewed before the first step that carries them (bke.core.upgrade.certificates): each renewed
    # file then rides in its component's ReplaceFiles, so a rollback restores it too.
    Step(StepKind.CERTIFICATES, "renew the certificates of every component the upgrade replaces", ONCE, _all,
         lambda c: c.certificates and (c.etcd or c.kubernetes or c.containerd)),
    Step(StepKind.ETCD, "each etcd cluster member by member; quorum and health checked between members",
         MEMBER_BY_MEMBER, _all, lambda c: c.etcd),
    Step(StepKind.KUBE_APISERVER, "every kube-apiserver, one node at a time", ONE_AT_A_TIME,
         _running("kube-apiserver"), lambda c: c.kubernetes),
    Step(StepKind.KUBE_CONTROLLER_MANAGER, "every kube-controller-manager, one node at a time", ONE_AT_A_TIME,
         _running("kube-controller-manager"), lambda c: c.kubernetes),
    Step(StepKind.KUBE_SCHEDULER, "every kube-scheduler, one node at a time", ONE_AT_A_TIME,
         _running("kube-scheduler"), lambda c: c.kubernetes),
    Step(StepKind.MASTERS_RUNTIME, "containerd and kubelet on masters and etcd nodes, one at a time", ONE_AT_A_TIME,
         _control_plane_side, lambda c: c.kubernetes or c.containerd, drain=True),
    Step(StepKind.WORKERS, "containerd and kubelet on workers in batches of --max-unavailable", MAX_UNAVAILABLE,
         _workers, lambda c: c.kubernetes or c.containerd, drain=True),
    Step(StepKind.ADDONS, "kube-proxy, CoreDNS, the CNI and user addons from the new version's manifests", ONCE, _all,
         lambda c: c.kubernetes),
    Step(StepKind.POST_CHECKS, "cluster health and every component's version", ONCE, _all, _always),
)


@dataclass(frozen=True)
class ExpandedStep:
    step: str
    group: str  # the etcd cluster for etcd steps, else ""
    batches: tuple[tuple[str, ...], ...]
    drain: bool = False

    @property
    def nodes(self) -> int:
        return sum(len(b) for b in self.batches)


_MAX_UNAVAILABLE_RE = re.compile(r"^([0-9]+)(%?)$")


def default_max_unavailable(nodes: int) -> int:
    """The larger of 1 node and 10% of them (rounded down, as Kubernetes rounds maxUnavailable)."""
    return max(1, nodes // 10)


def parse_max_unavailable(text: str | None, nodes: int) -> int:
    """`N` or `N%` of `nodes` (rounded down, at least 1); None is the default. ValueError names the flag."""
    if text is None:
        return default_max_unavailable(nodes)
    m = _MAX_UNAVAILABLE_RE.match(text.strip())
    if not m or (m[2] and not 0 < int(m[1]) <= 100) or (not m[2] and int(m[1]) < 1):
        raise ValueError(f"--max-unavailable: {text!r} is not a node count (N >= 1) or a percentage (1% to 100%)")
    n = int(m[1])
    return max(1, math.floor(nodes * n / 100)) if m[2] else n


def _chunks(hosts: list[str], size: int) -> tuple[tuple[str, ...], ...]:
    return tuple(tuple(hosts[i:i + size]) for i in range(0, len(hosts), size))


def expand_order(
    plan: Plan,
    change: Change,
    max_unavailable: str | None = None,
    left_out: Iterable[str] = (),
) -> list[ExpandedStep]:
    """ORDER for this plan: each step's batches of hostnames, in order. Nodes left out (dead
    agents the request ignored) are in no batch. Linear in the number of nodes."""
    parse_max_unavailable(max_unavailable, 1)  # a bad value is refused even when no step batches by it
    skip = set(left_out)
    out: list[ExpandedStep] = []
    for step in ORDER:
        if not step.run_if(change):
            continue
        if step.batching == ONCE:
            out.append(ExpandedStep(step.name, "", ()))
            continue
        if step.batching in (PER_ETCD_CLUSTER, MEMBER_BY_MEMBER):
            for c in plan.etcd_clusters:
                members = [m.hostname for m in c.members if m.hostname not in skip]
                batches = _chunks(members[:1], 1) if step.batching == PER_ETCD_CLUSTER else _chunks(members, 1)
                out.append(ExpandedStep(step.name, c.name, batches))
            continue
        hosts = [n.hostname for n in step.nodes(plan) if n.hostname not in skip]
        if not hosts:
            continue
        size = 1 if step.batching == ONE_AT_A_TIME else parse_max_unavailable(max_unavailable, len(hosts))
        out.append(ExpandedStep(step.name, "", _chunks(hosts, size), step.drain))
    return out
