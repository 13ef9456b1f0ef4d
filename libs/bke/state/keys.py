"""Redis key names, in one place so that every service agrees on them."""
from __future__ import annotations

__all__ = ["cluster_key", "plan_key", "plan_meta_key", "plan_replaceable_key", "request_key", "clusters_index"]

PREFIX = "bke"


def cluster_key(cluster: str, *parts: str) -> str:
    return ":".join((PREFIX, cluster, *parts))


def plan_key(cluster: str) -> str:
    return cluster_key(cluster, "plan")


def plan_meta_key(cluster: str) -> str:
    return cluster_key(cluster, "plan-meta")


def plan_replaceable_key(cluster: str) -> str:
    """The planner's own mark: the digest of a plan whose install failed before any node
    changed, so that a corrected spec may replace it."""
    return cluster_key(cluster, "plan-replaceable")


def request_key(request_id: str) -> str:
    return f"{PREFIX}:request:{request_id}"


def clusters_index() -> str:
    return f"{PREFIX}:clusters"
