"""The plan record: the planner writes it, the upgrader replaces it at an upgrade's (or a changed
spec's) end, every service reads it by reference through the plan store (bke.adapters.state.plans).

    bke:<c>:plan / plan-meta             string / hash  (planner; the upgrader replaces it at an upgrade's end)
"""
from __future__ import annotations

from .common import cluster_key

__all__ = ["plan_key", "plan_meta_key"]


def plan_key(cluster: str) -> str:
    return cluster_key(cluster, "plan")


def plan_meta_key(cluster: str) -> str:
    return cluster_key(cluster, "plan-meta")
