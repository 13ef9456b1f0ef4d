"""The planner's decision for one request: pure, no I/O.

Given the request bytes, the spec text and what is stored for the cluster, return the
event to publish and, for a new cluster, the plan to store.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from pydantic import ValidationError

from bke.contracts import ClusterRejected, ClusterRequested, ErrorItem, PlanCreated
from bke.plan import Plan, plan_spec_text
from bke.spec.loader import loc_to_path
from bke.state import plan_digest, plan_key

__all__ = ["Decision", "parse_request", "decide_plan", "against_stored"]


@dataclass(frozen=True)
class Decision:
    event: ClusterRejected | PlanCreated
    plan: Plan | None = None
    plan_json: str | None = None
    digest: str | None = None


def _request_id_of(body: bytes) -> str | None:
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    rid = value.get("requestId") if isinstance(value, dict) else None
    return rid if isinstance(rid, str) and rid else None


def parse_request(body: bytes) -> ClusterRequested | ClusterRejected:
    """A request, or the rejection that says which field is wrong."""
    try:
        return ClusterRequested.model_validate_json(body)
    except ValidationError as exc:
        errors = [
            ErrorItem(path=loc_to_path("", tuple(e["loc"])) or "message", message=e["msg"].removeprefix("Value error, "))
            for e in exc.errors(include_url=False)
        ]
        return ClusterRejected(request_id=_request_id_of(body), cluster=None, errors=errors)


def decide_plan(request_id: str, spec_text: bytes | str) -> Decision:
    outcome = plan_spec_text(spec_text, "spec")
    if not outcome.ok:
        errors = [ErrorItem(path=e.path, message=e.message) for e in outcome.errors]
        return Decision(ClusterRejected(request_id=request_id, cluster=outcome.cluster, errors=errors))
    plan = outcome.plan
    assert plan is not None
    plan_json = plan.to_json()
    digest = plan_digest(plan_json)
    event = PlanCreated(
        request_id=request_id,
        cluster=plan.cluster,
        plan_key=plan_key(plan.cluster),
        plan_digest=digest,
        nodes=len(plan.nodes),
        etcd_clusters=[c.name for c in plan.etcd_clusters],
        warnings=outcome.warnings,
    )
    return Decision(event, plan, plan_json, digest)


def against_stored(decision: Decision, stored_digest: str | None) -> Decision:
    """Same plan again is fine (idempotent); a different plan for an existing cluster is refused."""
    plan = decision.plan
    if plan is None or stored_digest is None or stored_digest == decision.digest:
        return decision
    return Decision(
        ClusterRejected(
            request_id=decision.event.request_id,
            cluster=plan.cluster,
            errors=[
                ErrorItem(
                    path="cluster.metadata.name",
                    message=f"cluster {plan.cluster!r} already exists with a different spec; "
                    "changing a running cluster is not supported yet",
                )
            ],
        )
    )
