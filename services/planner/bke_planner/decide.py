"""The planner's decisions: pure, no I/O.

Given the request bytes, the spec text and what is stored for the cluster (its digest, and
whether the planner marked it replaceable), return the event to publish and, for a new or a
replaced plan, the plan to store. Given an install's outcome, say whether its plan may be
replaced by a corrected spec.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from pydantic import ValidationError

from bke.contracts import ClusterRejected, InstallCluster, ErrorItem, PlanCreated
from bke.contracts.install import InstallFinished
from bke.contracts.statuses import FinishedStatus
from bke.core.plan import Plan, plan_spec_text
from bke.core.spec.loader import loc_to_path
from bke.adapters.state import plan_digest
from bke.adapters.state.keys.plan import plan_key

__all__ = ["Decision", "parse_request", "decide_plan", "against_stored", "replaceable_after", "request_id_of"]


@dataclass(frozen=True)
class Decision:
    event: ClusterRejected | PlanCreated
    plan: Plan | None = None
    plan_json: str | None = None
    digest: str | None = None
    replaces: str | None = None  # the stored digest this plan replaces (compare-and-swap on it)


def request_id_of(body: bytes) -> str | None:
    """The request id of bytes that are no valid request, when one can be read: the rejection
    then reaches the CLI that waits for it."""
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):  # json nests by recursion: `[[[...` 100,000 deep must not raise
        return None
    rid = value.get("requestId") if isinstance(value, dict) else None
    return rid if isinstance(rid, str) and rid else None


def parse_request(body: bytes) -> InstallCluster | ClusterRejected:
    """A request, or the rejection that says which field is wrong."""
    try:
        return InstallCluster.model_validate_json(body)
    except ValidationError as exc:
        errors = [
            ErrorItem(path=loc_to_path("", tuple(e["loc"])) or "message", message=e["msg"].removeprefix("Value error, "))
            for e in exc.errors(include_url=False)
        ]
        return ClusterRejected(request_id=request_id_of(body), cluster=None, errors=errors)


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


def against_stored(decision: Decision, stored_digest: str | None, replaceable: bool = False) -> Decision:
    """Same plan again is fine (idempotent). A different plan for an existing cluster replaces
    it while `replaceable` (its install failed before any node changed), else it is refused."""
    plan = decision.plan
    if plan is None or stored_digest is None or stored_digest == decision.digest:
        return decision
    if replaceable:
        return dataclasses.replace(decision, replaces=stored_digest)
    return Decision(
        ClusterRejected(
            request_id=decision.event.request_id,
            cluster=plan.cluster,
            errors=[
                ErrorItem(
                    path="cluster.metadata.name",
                    message=f"cluster {plan.cluster!r} already exists with a different spec (plan {stored_digest[:12]}); "
                    "changing a running cluster is not supported yet",
                )
            ],
        )
    )


def replaceable_after(event: InstallFinished) -> bool:
    """A plan may be replaced only while its install failed before any command reached a node;
    a success, or any change on a node, makes the stored plan the cluster's truth."""
    return event.status == FinishedStatus.FAILED and not event.nodes_changed
