"""The live facts the checks need, gathered before an upgrade is accepted.

- Health and the running operation come from the dispatcher's status contract
  (`bke.v1.status.get`): the install must have Succeeded, no node may be unhealthy in the latest
  health round, and no certificate rotation may be running (one operation per cluster).
- Live agents and each host's cgroup version come from the agents' facts the dispatcher keeps
  from their heartbeats, asked on the bus (`bke.v1.agent-facts.get`, bke_upgrader.agent_facts;
  never its keys): an agent whose last heartbeat is older than `heartbeat_stale_s` is not alive;
  a node that reported no cgroup version is "not known", and the CgroupV2 check (from 1.35) is
  then not checked for the cluster rather than guessed. No answer is AgentFactsUnavailable, a
  TemporaryError: the request is taken again later.
- Certificate expiry comes from the certs service's read model (`bke.v1.certs.expiration.get`,
  paged, what `bke certs check-expiration --cluster` shows), never from its store.
"""
from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from bke.contracts.agent_facts import HostFacts
from bke.contracts.statuses import InstallStatus
from bke.contracts.expiration import EXPIRATION_GET, MAX_LIMIT, CertExpiration, GetExpiration, parse_expiration_reply
from bke.contracts.status import STATUS_GET, ClusterStatus, GetStatus, StatusError, parse_status_reply
from bke.core.errors import TemporaryError
from bke.core.plan import Plan
from bke.core.upgrade import Facts
from bke.adapters.bus.asking import Request

from .agent_facts import AgentFactsClient

__all__ = ["LiveFacts", "cgroup_v1_hosts"]



class LiveFacts:
    def __init__(self, request: Request, now: Callable[[], datetime], *, heartbeat_stale_s: float,
                 timeout_s: float):
        self.request, self.now = request, now
        self.stale, self.timeout_s = heartbeat_stale_s, timeout_s
        self.agents = AgentFactsClient(request, timeout_s)  # the agents step's runtimes ask it too

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
        if status.status != InstallStatus.SUCCEEDED:
            healthy, why = False, f"the install of {plan.cluster} is {status.status}"
        elif status.node_health.unhealthy:
            healthy = False
            why = f"{status.node_health.unhealthy} node(s) unhealthy in the latest health round: " + \
                  ", ".join(status.node_health.unhealthy_nodes[:5])
        agents = await self.agents.get(plan.cluster, [n.hostname for n in plan.nodes])
        return Facts(now=now, healthy=healthy, health_reason=why, agents_alive=self.alive(agents, now),
                     cert_expiry=await self.cert_expiry(plan.cluster), cgroup_v1_hosts=cgroup_v1_hosts(agents))

    def alive(self, agents: dict[str, HostFacts], now: datetime) -> frozenset[str]:
        """The hosts whose agent was heard within `heartbeat_stale_s` of `now`."""
        stale = timedelta(seconds=self.stale)
        return frozenset(h for h, f in agents.items() if f.last_heartbeat is not None and now - f.last_heartbeat <= stale)

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


def cgroup_v1_hosts(agents: dict[str, HostFacts]) -> frozenset[str] | None:
    """Pure: the hosts whose agent reports cgroup v1; None while any has reported nothing."""
    if any(f.cgroup_version is None for f in agents.values()):
        return None
    return frozenset(h for h, f in agents.items() if f.cgroup_version == 1)
