"""The planner's one handler: a cluster request in, `plan created` or `cluster rejected` out."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Awaitable, Callable

from bke.contracts import CLUSTER_REJECTED, PLAN_CREATED, ClusterRejected, ClusterRequested, ErrorItem
from bke.errors import PermanentError
from bke.state import RedisPlanStore

from .decide import against_stored, decide_plan, parse_request

__all__ = ["PlannerDeps", "handle_cluster_requested"]

log = logging.getLogger("bke.planner")
Publish = Callable[[bytes, str, dict[str, str]], Awaitable[None]]


@dataclass
class PlannerDeps:
    store: RedisPlanStore
    publish: Publish  # (payload, subject, headers)
    fetch_blob: Callable[[str], Awaitable[bytes]]
    now: Callable[[], datetime]


async def handle_cluster_requested(body: bytes, deps: PlannerDeps) -> None:
    req = parse_request(body)
    if isinstance(req, ClusterRejected):
        await _reject(req, deps)
        return
    assert isinstance(req, ClusterRequested)
    if req.spec is not None:
        spec_text: bytes | str = req.spec
    else:
        try:
            spec_text = await deps.fetch_blob(req.spec_ref or "")
        except PermanentError as exc:
            await _reject(ClusterRejected(request_id=req.request_id, cluster=None, errors=[ErrorItem(path="specRef", message=str(exc))]), deps)
            return
    decision = decide_plan(req.request_id, spec_text)
    if decision.plan is not None:
        # The stored digest decides between "new", "same again" (idempotent) and "changed".
        meta = await deps.store.meta(decision.plan.cluster)
        decision = against_stored(decision, meta.digest if meta else None)
    if isinstance(decision.event, ClusterRejected):
        await _reject(decision.event, deps)
        return
    plan, plan_json, digest = decision.plan, decision.plan_json, decision.digest
    assert plan is not None and plan_json is not None and digest is not None
    stored = await deps.store.save(plan, plan_json, digest, req.request_id, deps.now().isoformat())
    if not stored:
        await deps.store.remember_request(req.request_id, plan.cluster)
    log.info(
        "plan created",
        extra={"cluster": plan.cluster, "request_id": req.request_id, "nodes": len(plan.nodes), "new": stored},
    )
    # The message id lets JetStream drop the duplicate of a redelivered request.
    await deps.publish(decision.event.to_bytes(), PLAN_CREATED, {"Nats-Msg-Id": f"plan:{req.request_id}:{digest}"})


async def _reject(event: ClusterRejected, deps: PlannerDeps) -> None:
    log.info("cluster rejected", extra={"cluster": event.cluster, "request_id": event.request_id, "errors": len(event.errors)})
    msg_id = f"rejected:{event.request_id}" if event.request_id else None
    await deps.publish(event.to_bytes(), CLUSTER_REJECTED, {"Nats-Msg-Id": msg_id} if msg_id else {})
