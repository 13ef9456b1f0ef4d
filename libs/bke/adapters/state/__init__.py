"""Redis adapters shared by the services."""
from .keys import cluster_key, clusters_index, plan_key, plan_meta_key, plan_replaceable_key, request_key
from .plans import PlanCache, PlanRecord, RedisPlanStore, plan_digest

__all__ = ["PlanCache", "PlanRecord", "RedisPlanStore", "cluster_key", "clusters_index", "plan_digest", "plan_key", "plan_meta_key",
           "plan_replaceable_key", "request_key"]
