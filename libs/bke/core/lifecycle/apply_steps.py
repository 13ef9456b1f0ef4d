"""A changed spec's run steps, as data: their kinds in the order they run (`APPLY_STEPS`), the
rows of the two node steps an upgrade does not have, and the expansion of the work the action
handlers ask for (bke.core.lifecycle.apply_run) into the run's steps of batches. Pure.

    expand_work(current, desired, work, max_unavailable, sequences) -> [ExpandedStep]
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from bke.core.plan import Plan
from bke.core.upgrade.order import MAX_UNAVAILABLE, MEMBER_BY_MEMBER, ONE_AT_A_TIME, ORDER, ExpandedStep, Step, parse_max_unavailable
from bke.core.upgrade.steps import StepKind
from .apply_members import member_steps
from .etcd_members import MemberSequence

__all__ = ["APPLY_STEPS", "CERTS_STEP", "CLEANUP_STEP", "DRAIN_STEP", "JOIN_STEP", "LABELS_STEP", "LB_STEP",
           "MEMBERSHIP_BATCH", "REMOVE_STEP", "STATIC_PODS", "UNREGISTER_STEP", "StepWork", "expand_work", "node_runs"]

LABELS_STEP = StepKind.LABELS
CERTS_STEP = StepKind.CERTIFICATES
REMOVE_STEP = StepKind.REMOVE_NODES
JOIN_STEP = StepKind.JOIN_NODES
DRAIN_STEP = StepKind.DRAIN_NODES
UNREGISTER_STEP = StepKind.DELETE_NODE_OBJECTS
LB_STEP = StepKind.LOAD_BALANCER
CLEANUP_STEP = StepKind.CLEANUP
# Where each changed etcd cluster's membership steps go (apply_members.member_steps): no step of its own
MEMBERSHIP = "etcd-members"
# The run's steps, in order: the upgrade's node steps (ORDER) between the record conversion
# (pre-checks, local) and the two cluster-wide steps done through the API, then the removals
# and the joins (each a request to the dispatcher).
# A node whose kubelet stops registering is cordoned and drained before anything touches it
# (DRAIN_STEP: a join inside the membership steps may write its standalone configuration); a node
# that runs less in place (`role_change` "sheds") is cleaned up once its components are rolled
# (CLEANUP_STEP: a standalone kubelet no longer reads kubelet.conf), and the Node object of one
# whose kubelet stopped registering is deleted after that (UNREGISTER_STEP).
APPLY_STEPS: tuple[str, ...] = (
    StepKind.PRE_CHECKS, StepKind.ETCD_SNAPSHOTS, CERTS_STEP, DRAIN_STEP, MEMBERSHIP, StepKind.ETCD,
    StepKind.KUBE_APISERVER, StepKind.KUBE_CONTROLLER_MANAGER, StepKind.KUBE_SCHEDULER, LB_STEP,
    StepKind.MASTERS_RUNTIME, StepKind.WORKERS, CLEANUP_STEP, UNREGISTER_STEP, StepKind.ADDONS, LABELS_STEP,
    REMOVE_STEP, JOIN_STEP)
MEMBERSHIP_BATCH = 1000  # nodes per JoinNodes / RemoveNodes (the contract's MAX_NODES)
# The control-plane load balancer (haproxy + keepalived on every master, for a VIP endpoint):
# haproxy.cfg lists every apiserver and keepalived.conf every master (its unicast peers, and
# priorities that depend on how many there are), so a master joining or leaving changes both on
# every master. One master at a time, like the static pods: the VIP and the other masters'
# haproxy keep serving while one restarts. Before the removals (a leaving master's apiserver
# leaves every load balancer before it stops) and before the joins (a backend that is not there
# yet is only marked down by haproxy's check until it answers).
_LB_ROW = Step(LB_STEP, "haproxy and keepalived on every master whose backends or VRRP peers change, one at a time",
               ONE_AT_A_TIME, lambda p: p.nodes_running("keepalived"), lambda c: False)
# A master that stops being one (`role_change` "sheds"): once its static pods and load balancer
# are gone, the certificates and kubeconfigs only a master holds (the apiserver's keys, the
# service-account key, admin.conf, ...) are taken off it, one node at a time.
_CLEANUP_ROW = Step(CLEANUP_STEP, "the files a master held and a worker does not, taken away, one node at a time",
                    ONE_AT_A_TIME, lambda p: [], lambda c: False)
_ROW = {**{s.name: s for s in ORDER}, LB_STEP: _LB_ROW, CLEANUP_STEP: _CLEANUP_ROW}
STATIC_PODS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")


@dataclass(frozen=True)
class StepWork:
    """Part of a step: these hosts (in the plan's order) take step `name` (of etcd cluster `group`)."""

    name: str
    group: str = ""
    hosts: tuple[str, ...] = ()


def node_runs(plan: Plan, host: str, component: str) -> bool:
    """`host` is in `plan` and runs `component` there."""
    node = plan.node_index[1].get(host)
    return node is not None and node.runs(component)


def _chunks(hosts: list[str], size: int) -> tuple[tuple[str, ...], ...]:
    return tuple(tuple(hosts[i:i + size]) for i in range(0, len(hosts), size))


def expand_work(current: Plan, desired: Plan, work: list[StepWork], max_unavailable: str | None,
            sequences: Mapping[str, MemberSequence]) -> list[ExpandedStep]:
    # the plan's order; a removed node (only in the current plan) after the others
    rank = {n.hostname: i for i, n in enumerate(desired.nodes)}
    rank.update({n.hostname: len(rank) + i for i, n in enumerate(current.nodes) if n.hostname not in rank})
    wanted: dict[tuple[str, str], set[str]] = {}
    for w in work:
        wanted.setdefault((w.name, w.group), set()).update(w.hosts)
    out = [ExpandedStep("pre-checks", "", ())]  # the stored records in their current form first
    etcd_order = {c.name: i for i, c in enumerate(desired.etcd_clusters)}
    for name in APPLY_STEPS[1:]:
        keys = sorted((k for k in wanted if k[0] == name), key=lambda k: etcd_order.get(k[1], -1))
        for key in keys:
            group = key[1]
            if name == "etcd-snapshots":  # taken from a member of the cluster as it runs now
                cluster = current.etcd_cluster(group)
                assert cluster is not None
                out.append(ExpandedStep(name, group, ((cluster.members[0].hostname,),)))
                continue
            if name == MEMBERSHIP:  # every cluster's at once (a node may join several)
                if keys[0] == key:
                    out += member_steps([sequences[k[1]] for k in keys])
                continue
            hosts = sorted(wanted[key], key=lambda h: rank[h])
            if not hosts:  # a cluster-wide step: the addons, the labels
                out.append(ExpandedStep(name, group, ()))
                continue
            if name in (REMOVE_STEP, JOIN_STEP, DRAIN_STEP, UNREGISTER_STEP):  # one request per batch, every node at once
                out.append(ExpandedStep(name, group, _chunks(hosts, MEMBERSHIP_BATCH)))
                continue
            if name in STATIC_PODS:  # a moved component starts where it goes before it stops where it leaves
                hosts.sort(key=lambda h: (h in current.node_index[1] and not node_runs(desired, h, name), rank[h]))
            if name == LB_STEP:  # the load balancers that stop go before the others change
                hosts.sort(key=lambda h: (node_runs(desired, h, "keepalived") or node_runs(desired, h, "haproxy"), rank[h]))
            row = _ROW[name]
            size = parse_max_unavailable(max_unavailable, len(hosts)) if row.batching == MAX_UNAVAILABLE else 1
            assert row.batching in (MAX_UNAVAILABLE, MEMBER_BY_MEMBER) or size == 1
            out.append(ExpandedStep(name, group, _chunks(hosts, size), row.drain))
    return out
