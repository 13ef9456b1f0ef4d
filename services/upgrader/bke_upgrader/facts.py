"""The live facts the checks need, gathered before an upgrade is accepted.

- Health and the running operation come from the dispatcher's status contract
  (`bke.v1.status.get`): the install must have Succeeded, no node may be unhealthy in the latest
  health round, and no certificate rotation may be running (one operation per cluster).
- Live agents come from their heartbeats (`bke:<c>:heartbeat`, node -> last time seen), the
  dispatcher's record, read only; so does each host's cgroup version as its agent reports it
  (`bke:<c>:heartbeat:cgroup`): a node that reported none is "not known", and the CgroupV2
  check (from 1.35) is then not checked for the cluster rather than guessed.
- Certificate expiry comes from the certs service's read model (`bke.v1.certs.expiration.get`,
  paged, what `bke certs check-expiration --cluster` shows), never from its store.
"""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from redis.asyncio import Redis

from bke.contracts.statuses import OperationStatus
from bke.contracts.expiration import EXPIRATION_GET, MAX_LIMIT, CertExpiration, GetExpiration, parse_expiration_reply
from bke.contracts.status import STATUS_GET, ClusterStatus, GetStatus, StatusError, parse_status_reply
from bke.core.errors import TemporaryError
from bke.core.plan import Plan
from bke.adapters.state.keys.dispatcher import heartbeat_cgroup_key, heartbeat_key
from bke.core.upgrade import Facts

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
        if status.status != OperationStatus.SUCCEEDED:
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
        return Facts(now=now, healthy=healthy, health_reason=why, agents_alive=frozenset(alive),
                     cert_expiry=await self.cert_expiry(plan.cluster),
                     cgroup_v1_hosts=await self.cgroup_v1_hosts(plan))

    async def cert_expiry(self, cluster: str) -> dict[str, datetime] | None:
        """instance id -> notAfter, every page; None when the certs service does not answer or
        has no PKI for the cluster (the check is then listed as not checked)."""
        out: dict[str, datetime] = {}
        offset: int | None = 0
        while offset is not None:
            ask = GetExpiration(cluster=cluster, offset=offset, limit=MAX_LIMIT).to_bytes()
            try:
                page = parse_expiration_reply(await self.request(EXPIRATION_GET, ask, self.timeout_s))
            except Exception:  # noqa: BLE001 - no answer, or not one: not known, never guessed
                return None
            if not isinstance(page, CertExpiration):
                return None
            out.update((r.instance, datetime.fromisoformat(r.not_after)) for r in page.rows)
            offset = page.next_offset
        return out

    async def cgroup_v1_hosts(self, plan: Plan) -> frozenset[str] | None:
        """Hosts whose agent reports cgroup v1; None while any node has reported nothing."""
        raw = {_s(k): _s(v) for k, v in (await self.r.hgetall(heartbeat_cgroup_key(plan.cluster))).items()}
        if any(n.hostname not in raw for n in plan.nodes):
            return None
        return frozenset(h for h, v in raw.items() if v == "1")
