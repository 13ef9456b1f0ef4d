"""From spec text to plan or errors: the one decision the planner service and `bke plan` share."""
from __future__ import annotations

from pydantic import BaseModel

from bke.core.spec import FieldError, load_spec, validate_spec
from .models import Plan
from .placement import build_plan

__all__ = ["PlanOutcome", "plan_spec_text"]


class PlanOutcome(BaseModel):
    plan: Plan | None
    cluster: str | None
    errors: list[FieldError]
    warnings: list[str] = []

    @property
    def ok(self) -> bool:
        return self.plan is not None


def plan_spec_text(text: str | bytes, source: str = "<spec>") -> PlanOutcome:
    loaded = load_spec(text, source)
    if loaded.spec is None:
        return PlanOutcome(plan=None, cluster=loaded.cluster_name, errors=loaded.errors)
    report = validate_spec(loaded.spec)
    errors = loaded.errors + report.errors
    if errors:
        return PlanOutcome(plan=None, cluster=loaded.cluster_name, errors=errors, warnings=report.warnings)
    plan = build_plan(loaded.spec, report.warnings)
    return PlanOutcome(plan=plan, cluster=plan.cluster, errors=[], warnings=report.warnings)
