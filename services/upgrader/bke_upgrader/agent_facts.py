"""The agents' facts, asked of the dispatcher (bke.contracts.agent_facts): which agents are alive,
the cgroup version and the runtime each reports. The dispatcher hears the heartbeats and keeps
them; this service asks, and never reads its keys.

A cluster of thousands of nodes is asked in chunks of MAX_HOSTS hosts, sent side by side (10,000
nodes: 20 requests at once, each reply well under NATS' payload limit).

    TemporaryError
    └── AgentFactsUnavailable   no dispatcher answered in time, it answered Unavailable (its state
                                lost, its store away), or its answer is not one this code reads:
                                the caller's message or pass is retried after `delay`
"""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from pydantic import ValidationError

from bke.contracts.agent_facts import AGENT_FACTS_GET, MAX_HOSTS, GetAgentFacts, HostFacts, parse_agent_facts_reply
from bke.contracts.status import StatusError
from bke.core.errors import TemporaryError

__all__ = ["AgentFactsClient", "AgentFactsUnavailable", "Request"]

Request = Callable[[str, bytes, float], Awaitable[bytes]]  # subject, payload, timeout -> reply
RETRY_S = 5.0


class AgentFactsUnavailable(TemporaryError):
    """The dispatcher did not tell the agents' facts: ask again later (see the module docstring)."""

    def __init__(self, message: str, delay: float = RETRY_S):
        super().__init__(message, delay)


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
        try:
            reply = parse_agent_facts_reply(await self.request(AGENT_FACTS_GET, body, self.timeout_s))
        except ValidationError as exc:
            raise AgentFactsUnavailable(f"{AGENT_FACTS_GET}: an answer that is no AgentFacts "
                                        f"({exc.error_count()} error(s))") from exc
        except Exception as exc:  # noqa: BLE001 - no dispatcher answered in time: ask again later
            raise AgentFactsUnavailable(f"no answer on {AGENT_FACTS_GET}: {type(exc).__name__}") from exc
        if isinstance(reply, StatusError):
            raise AgentFactsUnavailable(f"{AGENT_FACTS_GET}: the dispatcher answered {reply.reason}: {reply.message}")
        return reply.hosts
