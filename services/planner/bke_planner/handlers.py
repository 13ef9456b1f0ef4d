"""The planner's handlers: a cluster request in, `plan created` or `cluster rejected` out; an
install's outcome in, the plan's replaceable mark set or cleared.

Replicas agree through Redis alone: the plan is written with a compare (once for a new cluster,
compare-and-swap on the old digest for a replacement); a replica that loses the write re-reads
what the winner stored and decides again against it.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Awaitable, Callable

from bke.contracts import CLUSTER_REJECTED, PLAN_CREATED, ClusterRejected, InstallCluster, ErrorItem
from bke.contracts.install import InstallFinished
from bke.adapters.bus.handler import Out
from bke.core.errors import PermanentError, TemporaryError
from bke.adapters.state import RedisPlanStore

from .decide import Decision, against_stored, decide_plan, parse_request, replaceable_after

__all__ = ["PlannerDeps", "ensure_plan_stored", "handle_install_cluster", "handle_install_finished", "refuse_request"]

log = logging.getLogger("bke.planner")


@dataclass
class PlannerDeps:
    store: RedisPlanStore
    fetch_blob: Callable[[str], Awaitable[bytes]]
    now: Callable[[], datetime]


def refuse_request(body: bytes) -> list[Out]:
    """A request that is no valid `InstallCluster` is answered, not dead-lettered: it comes from
    a user, who must learn which field is wrong."""
    req = parse_request(body)
    return [_rejected(req)] if isinstance(req, ClusterRejected) else []


async def handle_install_cluster(req: InstallCluster, deps: PlannerDeps) -> list[Out]:
    if req.spec is not None:
        spec_text: bytes | str = req.spec
    else:
        try:
            spec_text = await deps.fetch_blob(req.spec_ref or "")
        except PermanentError as exc:
            return [_rejected(ClusterRejected(request_id=req.request_id, cluster=None,
                                              errors=[ErrorItem(path="specRef", message=str(exc))]))]
    decision = decide_plan(req.request_id, spec_text)
    if decision.plan is not None:
        decision = await ensure_plan_stored(decision, req.request_id, deps)
    if isinstance(decision.event, ClusterRejected):
        return [_rejected(decision.event)]
    plan, digest = decision.plan, decision.digest
    assert plan is not None and digest is not None
    log.info(
        "plan created",
        extra={"cluster": plan.cluster, "request_id": req.request_id, "nodes": len(plan.nodes), "replaced": decision.replaces},
    )
    # The message id lets JetStream drop the duplicate of a redelivered request.
    return [Out(decision.event, PLAN_CREATED, f"plan:{req.request_id}:{digest}")]


# Each lost write means another replica stored a plan in between; after a few, retry later.
_MAX_LOST_WRITES = 4


async def ensure_plan_stored(decision: Decision, request_id: str, deps: PlannerDeps) -> Decision:
    """Decide against what is stored and make it so: store a new plan once, replace a
    replaceable one by compare-and-swap, or leave the same plan. A lost write re-reads."""
    plan, plan_json, digest = decision.plan, decision.plan_json, decision.digest
    assert plan is not None and plan_json is not None and digest is not None
    for _ in range(_MAX_LOST_WRITES):
        meta = await deps.store.meta(plan.cluster)
        stored = meta.digest if meta else None
        mark = await deps.store.replaceable(plan.cluster) if stored is not None else None
        decided = against_stored(decision, stored, replaceable=stored is not None and mark == stored)
        if isinstance(decided.event, ClusterRejected):
            return decided
        now = deps.now().isoformat()
        if stored is None:  # a new cluster: the first replica to store wins
            won = await deps.store.save(plan, plan_json, digest, request_id, now)
        elif decided.replaces is not None:  # a corrected spec: compare-and-swap on the old digest
            won = await deps.store.replace(plan, plan_json, digest, decided.replaces, request_id, now)
        else:  # the same plan again
            await deps.store.remember_request(request_id, plan.cluster)
            return decided
        if won:
            return decided
    raise TemporaryError(f"plan of cluster {plan.cluster!r} kept changing while storing it", delay=1.0)


async def handle_install_finished(event: InstallFinished, deps: PlannerDeps) -> None:
    """Mark the plan replaceable after a failure that changed no node; any other outcome clears it."""
    if replaceable_after(event):
        marked = await deps.store.mark_replaceable(event.cluster, event.plan_digest)
    else:
        await deps.store.clear_replaceable(event.cluster)
        marked = False
    log.info("install outcome", extra={"cluster": event.cluster, "request_id": event.request_id, "status": event.status,
                                        "nodes_changed": event.nodes_changed, "replaceable": marked})


def _rejected(event: ClusterRejected) -> Out:
    log.info("cluster rejected", extra={"cluster": event.cluster, "request_id": event.request_id, "errors": len(event.errors)})
    return Out(event, CLUSTER_REJECTED, f"rejected:{event.request_id}" if event.request_id else None)
