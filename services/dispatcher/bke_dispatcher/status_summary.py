"""Summaries over every node for the status reply: health counts and the distinct applied
label sets. Pure; a reply stays small at 10,000 nodes because per-node detail rides on the
paged node rows and only these summaries cover every node."""
from __future__ import annotations

from typing import Any

from bke.contracts.status import MAX_LABEL_SETS, HealthCounts, LabelSet, NodeHealth, NodeTaint
from bke.contracts.statuses import HealthStatus

__all__ = ["UNHEALTHY_SHOWN", "health_counts", "label_sets", "node_health", "node_taints"]

UNHEALTHY_SHOWN = 20


def node_health(doc: dict[str, Any] | None) -> NodeHealth | None:
    if not doc or doc.get("status") not in tuple(HealthStatus):
        return None
    return NodeHealth(status=doc["status"], failing=list(doc.get("failing") or []), at=doc.get("at"))


def node_taints(doc: dict[str, Any] | None) -> list[NodeTaint] | None:
    if not doc:
        return None
    return [NodeTaint(key=t["key"], value=t.get("value", ""), effect=t["effect"]) for t in doc.get("taints") or []]


def health_counts(order: list[str], health: dict[str, dict[str, Any]]) -> HealthCounts:
    healthy = unhealthy = 0
    bad: list[str] = []
    for h in order:
        status = (health.get(h) or {}).get("status")
        if status == HealthStatus.HEALTHY:
            healthy += 1
        elif status == HealthStatus.UNHEALTHY:
            unhealthy += 1
            if len(bad) < UNHEALTHY_SHOWN:
                bad.append(h)
    return HealthCounts(healthy=healthy, unhealthy=unhealthy, unknown=len(order) - healthy - unhealthy, unhealthy_nodes=bad)


def label_sets(order: list[str], records: dict[str, dict[str, Any]]) -> tuple[list[LabelSet], int, int]:
    """(the largest MAX_LABEL_SETS distinct sets, largest first; how many nodes are labelled;
    how many distinct sets were left out)."""
    counts: dict[tuple, int] = {}
    labelled = 0
    for h in order:
        doc = records.get(h)
        if not doc:
            continue
        labelled += 1
        key = (tuple(sorted((doc.get("labels") or {}).items())),
               tuple((t["key"], t.get("value", ""), t["effect"]) for t in doc.get("taints") or []))
        counts[key] = counts.get(key, 0) + 1
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    sets = [LabelSet(labels=dict(labels), taints=[NodeTaint(key=k, value=v, effect=e) for k, v, e in taints], nodes=n)
            for (labels, taints), n in ranked[:MAX_LABEL_SETS]]
    return sets, labelled, max(0, len(ranked) - MAX_LABEL_SETS)
