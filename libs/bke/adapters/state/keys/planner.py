"""The planner's own keys: which clusters have a plan, requests, its recent answers.

    bke:clusters                         set     clusters with a plan            (planner)
    bke:request:<id>                     string  request id -> cluster           (planner)
    bke:<c>:plan-replaceable             string  digest of a replaceable plan    (planner)
    bke:recent-plans                     list    the last plans and rejections    (planner)

The plan itself is the `plan` family (the upgrader replaces it too).
"""
from __future__ import annotations

from .common import PREFIX, cluster_key

__all__ = ["clusters_index", "plan_replaceable_key", "recent_plans_key", "request_key"]


def clusters_index() -> str:
    return f"{PREFIX}:clusters"


def plan_replaceable_key(cluster: str) -> str:
    """The planner's own mark: the digest of a plan whose install failed before any node
    changed, so that a corrected spec may replace it."""
    return cluster_key(cluster, "plan-replaceable")


def request_key(request_id: str) -> str:
    return f"{PREFIX}:request:{request_id}"


def recent_plans_key() -> str:
    """The planner's bounded list of its last answers (its dashboard). Global keys have two
    parts, so no cluster's key (three or more) can be one of them."""
    return f"{PREFIX}:recent-plans"
