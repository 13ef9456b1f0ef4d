"""The etcd-only nodes of a join, the pure part: do the request's etcd joins match the stored
plan, and what the join record keeps of them (bke_dispatcher.ops.join.decide uses both).

An etcd-only node joins a running etcd cluster as kubeadm joins a member: the caller (bke
apply's run) adds it as a learner on a member that stays, the join starts it with
`--initial-cluster-state=existing` and exactly the caller's `initial_cluster` (etcd's runtime
reconfiguration guide; bke.core.render.EtcdJoin), and the caller promotes it after the join
(bke.core.lifecycle.etcd_members). The join only needs to know, per member and etcd cluster, that list.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from bke.contracts.membership import JoinNodes, MembershipEtcdJoin
from bke.core.plan import NodePlan

from ...phases import ETCD

__all__ = ["EtcdJoinRecord", "etcd_join_refusal"]


@dataclass(frozen=True)
class EtcdJoinRecord:
    """A new member's start in its running etcd cluster (JoinNodes.etcd_joins), kept in the
    record: the renderer is asked for it (again, after a restart) from here."""

    etcd_cluster: str
    member: str
    initial_cluster: str

    def message(self) -> MembershipEtcdJoin:
        return MembershipEtcdJoin(etcd_cluster=self.etcd_cluster, member=self.member, initial_cluster=self.initial_cluster)


def etcd_join_refusal(req: JoinNodes, by_name: dict[str, NodePlan]) -> str:
    """Why the request's etcd joins do not match the stored plan ("" if they do): each joining
    etcd member is named once for each etcd cluster it is a member of and does not run yet
    (a node joining again runs the members its `rejoin.running` names), and for no other; each
    entry names a node of the request. (That `initial_cluster` lists the member itself is the
    renderer's check, bke.core.render.components.etcd_defaults: one rule, one place.)"""
    joins, joined = req.etcd_joins or [], set(req.nodes)
    outside = sorted({e.member for e in joins if e.member not in joined})
    if outside:
        return f"etcdJoins: not among the nodes of this join: {', '.join(outside[:5])}"
    pairs = Counter((e.member, e.etcd_cluster) for e in joins)
    twice = sorted(f"{m} ({c})" for (m, c), k in pairs.items() if k > 1)
    if twice:
        return f"etcdJoins: named twice: {', '.join(twice[:5])}"
    named = set(pairs)
    wrong = sorted(f"{m} in {c} (a member of {', '.join(_etcd_of(by_name[m])) or 'no etcd cluster'})"
                   for m, c in named if c not in _etcd_of(by_name[m]))
    if wrong:
        return f"etcdJoins: not a member of that etcd cluster in the stored plan: {'; '.join(wrong[:5])}"
    # a node joining again (JoinNodes.rejoin) already runs the members it names: no start there
    running = {(r.hostname, c) for r in req.rejoin or [] for c in r.running if c in ETCD}
    started = sorted(f"{m} in {c}" for m, c in named if (m, c) in running)
    if started:
        return f"etcdJoins: a member of that etcd cluster already (rejoin.running names it): {'; '.join(started[:5])}"
    missing = sorted(f"{h} ({c})" for h in req.nodes for c in _etcd_of(by_name[h])
                     if (h, c) not in named and (h, c) not in running)
    if missing:
        return (f"nodes: etcd members without an etcdJoins entry (the caller adds each as a learner first and "
                f"names it there): {', '.join(missing[:5])}")
    return ""


def _etcd_of(node: NodePlan) -> list[str]:
    """The etcd clusters the node is a member of (a member runs its cluster's component)."""
    return [c for c in ETCD if c in node.components]
