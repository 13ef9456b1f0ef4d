"""Redis adapters shared by the services. Key names: the family modules of bke.adapters.state.keys."""
from .plans import PlanCache, PlanRecord, RedisPlanStore, plan_digest

__all__ = ["PlanCache", "PlanRecord", "RedisPlanStore", "plan_digest"]
