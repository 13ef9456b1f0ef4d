"""What the renderer did lately, for its dashboard and /metrics: every outcome of a render is
counted (`bke_renders_total{kubernetes_version,result}`; result: rendered = a new file set
stored, unchanged = the stored set was already this one, failed) and kept in its bounded recent
list (`bke:recent-renders`, bke.adapters.state.recent) with the failure's errors or the set's size.

The handlers call `observe` with the plan (the version is the plan's, which no event carries).
"""
from __future__ import annotations

from datetime import datetime
from typing import Any, Callable

from redis.asyncio import Redis

from bke.adapters.bus.handler import Out
from bke.contracts.render import ManifestsRendered, RenderFailed
from bke.core.plan import Plan
from bke.adapters.state.keys.renderer import recent_renders_key
from bke.adapters.state.recent import RecentLog

__all__ = ["RenderHistory"]


class RenderHistory:
    def __init__(self, metrics: Any, redis: Redis, now: Callable[[], datetime]):
        self.log = RecentLog(redis, recent_renders_key())
        self.now = now
        self.count = metrics.counter("bke_renders", "Renders by the plan's Kubernetes version and outcome",
                                     ["kubernetes_version", "result"])

    async def observe(self, plan: Plan, stored: bool, said: Out) -> None:
        ev = said.message
        entry: dict[str, Any] = {"at": self.now().isoformat(), "cluster": plan.cluster,
                                 "kubernetesVersion": plan.kubernetes_version, "etcdVersion": plan.etcd_version}
        if isinstance(ev, ManifestsRendered):
            result = "rendered" if stored else "unchanged"
            entry.update(requestId=ev.request_id, digest=ev.digest, nodes=ev.nodes, files=ev.files, tier=ev.tier,
                         templateSets=ev.template_sets, warnings=ev.warnings)
        elif isinstance(ev, RenderFailed):
            result = "failed"
            entry.update(requestId=ev.request_id, kind=ev.kind, errors=ev.errors)
        else:
            return
        self.count.labels(plan.kubernetes_version, result).inc()
        await self.log.add({**entry, "result": result})

    async def recent(self, limit: int) -> list[dict[str, Any]]:
        return await self.log.read(limit)
