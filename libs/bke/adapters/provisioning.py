"""Record an agent's key through the provisioning channel (`bke.v1.agents.provision`).

Why a request and not a fire-and-forget command: the agent must not start before its key is
recorded, else its registration is refused (trust is provisioned, never announced). The
certs service answers once the key is stored; until a certs replica listens ("no responders",
e.g. the services are still starting), the request is asked again under a deadline.

Only the operator identity may publish this subject (NATS permissions, bke.adapters.auth.permissions).
"""
from __future__ import annotations

import asyncio
import time

from collections.abc import Mapping
from typing import Protocol

from nats.aio.client import Client as NatsClient
from nats.errors import NoRespondersError, TimeoutError as NatsTimeout

from bke.contracts.agent import AGENTS_PROVISION, AgentProvisioned, ProvisionAgent

__all__ = ["ProvisionRefused", "provision_agent", "provision_agents"]

RETRY_S = 0.2


class ProvisionRefused(RuntimeError):
    """The certs service refused to record the key (the reason names the field)."""


async def provision_agent(nc: NatsClient, req: ProvisionAgent, timeout_s: float = 60.0) -> AgentProvisioned:
    """Ask the certs service to record `req`; retried while nobody answers, within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            msg = await nc.request(AGENTS_PROVISION, req.to_bytes(), timeout=min(5.0, timeout_s))
        except (NoRespondersError, NatsTimeout):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no certs service recorded the agent key of {req.node} within {timeout_s:.0f}s") from None
            await asyncio.sleep(RETRY_S)  # polling under a deadline: the certs service is starting
            continue
        answer = AgentProvisioned.model_validate_json(msg.data)
        if not answer.ok:
            raise ProvisionRefused(f"agent key of {req.node} not recorded: {answer.reason}")
        return answer


class _Keyed(Protocol):
    agent_id: str
    public_key_b64: str


async def provision_agents(nc: NatsClient, cluster: str, agents: Mapping[str, _Keyed], *, in_flight: int = 256,
                           timeout_s: float = 60.0) -> None:
    """Record many agents' keys (a benchmark's fleet of thousands), `in_flight` requests at once."""
    gate = asyncio.Semaphore(in_flight)

    async def one(node: str, agent: _Keyed) -> None:
        async with gate:
            await provision_agent(nc, ProvisionAgent(cluster=cluster, node=node, agent_id=agent.agent_id,
                                                     seal_public_key_b64=agent.public_key_b64), timeout_s)

    await asyncio.gather(*(one(node, agent) for node, agent in agents.items()))
