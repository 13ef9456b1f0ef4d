"""The agents' facts, asked of the dispatcher (bke.contracts.agent_facts): which agents are alive,
the cgroup version and the runtime each reports. The dispatcher hears the heartbeats and keeps
them; this service asks, and never reads its keys.

A cluster of thousands of nodes is asked in chunks of MAX_HOSTS hosts, sent side by side (10,000
nodes: 20 requests at once, each reply well under NATS' payload limit).

    OwnerUnavailable (bke.adapters.bus.asking)
    └── AgentFactsUnavailable   no dispatcher answered in time, it answered Unavailable (its state
                                lost, its store away), or its answer is not one this code reads:
                                the caller's message or pass is retried after `delay`
"""
from __future__ import annotations

import asyncio

from bke.adapters.bus.asking import OwnerUnavailable, Request, ask_owner
from bke.contracts.agent_facts import AGENT_FACTS_GET, MAX_HOSTS, GetAgentFacts, HostFacts, parse_agent_facts_reply

__all__ = ["AgentFactsClient", "AgentFactsUnavailable", "Request"]


class AgentFactsUnavailable(OwnerUnavailable):
    """The dispatcher did not tell the agents' facts: ask again later (see the module docstring)."""


class AgentFactsClient:
    def __init__(self, request: Request, timeout_s: float, chunk: int = MAX_HOSTS):
        self.request, self.timeout_s, self.chunk = request, timeout_s, min(chunk, MAX_HOSTS)

    async def get(self, cluster: str, hosts: list[str]) -> dict[str, HostFacts]:
        """Each of `hosts`' facts (a host the dispatcher does not know: all None). Raises
        AgentFactsUnavailable when any chunk is not answered."""
        chunks = [hosts[i:i + self.chunk] for i in range(0, len(hosts), self.chunk)]
        out = {h: HostFacts(hostname=h) for h in hosts}
        for part in await asyncio.gather(*(self._ask(cluster, c) for c in chunks)):
            out.update((f.hostname, f) for f in part if f.hostname in out)
        return out

    async def _ask(self, cluster: str, hosts: list[str]) -> list[HostFacts]:
        body = GetAgentFacts(cluster=cluster, hosts=hosts).to_bytes()
        reply = await ask_owner(self.request, AGENT_FACTS_GET, body, self.timeout_s, parse_agent_facts_reply,
                                AgentFactsUnavailable, "dispatcher", "AgentFacts")
        return reply.hosts
