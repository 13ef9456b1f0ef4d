"""What the planner answered lately, for its dashboard and /metrics: every `plan created` and
`cluster rejected` it publishes is counted (`bke_plans_total{result}`: created, rejected) and
kept in its bounded recent list (`bke:recent-plans`, bke.adapters.state.recent) with the rejection's
errors.

It watches the publish function (one wrapper in app.py), so that a rejection answered for
bytes that are no request at all (the handler's `refuse` path) is kept too; it records after
the publish succeeded, so that what it lists is what was said on the bus.
"""
from __future__ import annotations

from datetime import datetime
from typing import Any, Callable

from redis.asyncio import Redis

from bke.contracts import CLUSTER_REJECTED, PLAN_CREATED, ClusterRejected, PlanCreated
from bke.adapters.state.keys.planner import recent_plans_key
from bke.adapters.state.recent import RecentLog
from bke.adapters.bus.handler import Publish

__all__ = ["PlanHistory"]



class PlanHistory:
    def __init__(self, metrics: Any, redis: Redis, now: Callable[[], datetime]):
        self.log = RecentLog(redis, recent_plans_key())
        self.now = now
        self.count = metrics.counter("bke_plans", "Plans created and requests rejected by this planner", ["result"])
        for result in ("created", "rejected"):
            self.count.labels(result)  # both series exist from the start (a rate of 0, not absent)

    def watching(self, publish: Publish) -> Publish:
        async def send(payload: bytes, subject: str, headers: dict[str, str]) -> None:
            await publish(payload, subject, headers)
            if subject == PLAN_CREATED:
                await self.created(PlanCreated.model_validate_json(payload))
            elif subject == CLUSTER_REJECTED:
                await self.rejected(ClusterRejected.model_validate_json(payload))

        return send

    async def created(self, ev: PlanCreated) -> None:
        self.count.labels("created").inc()
        await self.log.add({"at": self.now().isoformat(), "result": "created", "cluster": ev.cluster,
                            "requestId": ev.request_id, "nodes": ev.nodes, "digest": ev.plan_digest,
                            "etcdClusters": ev.etcd_clusters, "warnings": ev.warnings})

    async def rejected(self, ev: ClusterRejected) -> None:
        self.count.labels("rejected").inc()
        await self.log.add({"at": self.now().isoformat(), "result": "rejected", "cluster": ev.cluster or "",
                            "requestId": ev.request_id or "",
                            "errors": [{"path": e.path, "message": e.message} for e in ev.errors]})

    async def recent(self, limit: int) -> list[dict[str, Any]]:
        return await self.log.read(limit)
