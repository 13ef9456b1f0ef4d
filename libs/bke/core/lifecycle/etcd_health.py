"""Which etcd members the latest health round found unhealthy, per etcd cluster, from the
dispatcher's status contract: the input of the diff's quorum rule (`diff_plans`).

A node's health answer lists its failing checks by step id (`health:<etcd cluster>` for the
member it runs, `bke.core.node_steps.health_steps`), so a node that runs members of two etcd clusters
counts only against the one whose check failed. A node with no answer yet is not counted: the
health round has not reached it, and guessing it down would refuse changes a healthy cluster
allows (the apply itself checks health again before each member change).
"""
from __future__ import annotations

from typing import Iterable

from bke.contracts.status import StatusNode
from bke.contracts.statuses import HealthStatus
from bke.core.plan import Plan

__all__ = ["unhealthy_etcd_members"]


def unhealthy_etcd_members(plan: Plan, nodes: Iterable[StatusNode]) -> dict[str, frozenset[str]]:
    """etcd cluster -> the hosts whose member of it failed its health check (clusters with none
    are left out)."""
    members = {c.name: {m.hostname for m in c.members} for c in plan.etcd_clusters}
    out: dict[str, set[str]] = {}
    for n in nodes:
        if n.health is None or n.health.status != HealthStatus.UNHEALTHY:
            continue
        for name, hosts in members.items():
            if n.hostname in hosts and f"health:{name}" in n.health.failing:
                out.setdefault(name, set()).add(n.hostname)
    return {k: frozenset(v) for k, v in sorted(out.items())}
