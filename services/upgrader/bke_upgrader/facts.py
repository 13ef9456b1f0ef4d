"""The live facts the checks need, gathered before an upgrade is accepted.

- Health and the running operation come from the dispatcher's status contract
  (`bke.v1.status.get`): the install must have Succeeded, no node may be unhealthy in the latest
  health round, and no certificate rotation may be running (one operation per cluster).
- Live agents come from their heartbeats (`bke:<c>:heartbeat`, node -> last time seen), the
  dispatcher's record, read only.
"""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from redis.asyncio import Redis

from bke.contracts.status import STATUS_GET, ClusterStatus, GetStatus, StatusError, parse_status_reply
from bke.errors import TemporaryError
from bke.plan import Plan
from bke.state.keys import heartbeat_key
from bke.upgrade import Facts

__all__ = ["LiveFacts", "StatusRequest"]

StatusRequest = Callable[[str, bytes, float], Awaitable[bytes]]  # subject, payload, timeout -> reply


def _s(v: object) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class LiveFacts:
    def __init__(self, redis: Redis, request: StatusRequest, now: Callable[[], datetime], *,
                 heartbeat_stale_s: float, timeout_s: float):
        self.r, self.request, self.now = redis, request, now
        self.stale, self.timeout_s = heartbeat_stale_s, timeout_s

    async def status(self, cluster: str) -> ClusterStatus | StatusError:
        ask = GetStatus(cluster=cluster, nodes="none").to_bytes()
        try:
            raw = await self.request(STATUS_GET, ask, self.timeout_s)
        except Exception as exc:  # noqa: BLE001 - no dispatcher answered: ask again later
            raise TemporaryError(f"no answer on {STATUS_GET}: {type(exc).__name__}", delay=5.0) from exc
        return parse_status_reply(raw)

    async def gather(self, plan: Plan, status: ClusterStatus) -> Facts:
        now = self.now()
        healthy, why = True, ""
        if status.status != "Succeeded":
            healthy, why = False, f"the install of {plan.cluster} is {status.status}"
        elif status.node_health.unhealthy:
            healthy = False
            why = f"{status.node_health.unhealthy} node(s) unhealthy in the latest health round: " + \
                  ", ".join(status.node_health.unhealthy_nodes[:5])
        beats = {_s(k): _s(v) for k, v in (await self.r.hgetall(heartbeat_key(plan.cluster))).items()}
        alive = set()
        for host, at in beats.items():
            try:
                if now - datetime.fromisoformat(at) <= timedelta(seconds=self.stale):
                    alive.add(host)
            except ValueError:
                continue
        return Facts(now=now, healthy=healthy, health_reason=why, agents_alive=frozenset(alive))
