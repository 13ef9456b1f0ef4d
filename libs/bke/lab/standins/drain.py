"""The lab's drainer: no API, so each action is recorded, per node, in a hash of the caller's (the
upgrader's `bke:<c>:upgrade:drain`, the dispatcher's removal `bke:<c>:removal:api`): hostname ->
{cordoned, drained, uncordoned, deleted: timestamps}, so that tests and `bke status` can see
that every node went through each action in order (bke.adapters.drain.KubernetesDrainer in a
real cluster).
"""
from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime

from redis.asyncio import Redis

from bke.contracts.drain import DrainOptions
from bke.core.plan import Plan

__all__ = ["LabDrainer"]


class LabDrainer:
    def __init__(self, redis: Redis, now: Callable[[], datetime], key: Callable[[str], str]):
        self.r, self.now, self.key = redis, now, key

    async def _mark(self, cluster: str, hosts: list[str], field: str) -> None:
        key = self.key(cluster)
        raw = await self.r.hmget(key, hosts)
        at = self.now().isoformat()
        docs: dict[str | bytes, str] = {}
        for h, v in zip(hosts, raw):
            doc = json.loads(v) if v else {}
            doc.setdefault(field, at)  # idempotent: a re-run keeps the first time
            docs[h] = json.dumps(doc)
        if docs:
            await self.r.hset(key, mapping=docs)  # type: ignore[arg-type]  # redis-py's Mapping is invariant in its key

    async def cordon_and_drain(self, plan: Plan, hosts: list[str], timeout_s: float,
                               options: DrainOptions = DrainOptions()) -> str:
        # no pods to judge here: the options matter only where pods run (bke.adapters.drain)
        await self._mark(plan.cluster, hosts, "cordoned")
        await self._mark(plan.cluster, hosts, "drained")
        return ""

    async def uncordon(self, plan: Plan, hosts: list[str]) -> None:
        await self._mark(plan.cluster, hosts, "uncordoned")

    async def delete_nodes(self, plan: Plan, hosts: list[str]) -> None:
        await self._mark(plan.cluster, hosts, "deleted")
