"""The agents' facts over the bus, on real NATS and Redis: the upgrader's question
(bke_upgrader.agent_facts) answered by a real dispatcher (`bke.v1.agent-facts.get`) from what the
heartbeats recorded, a large cluster in chunks; with no dispatcher, a retryable error."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest

from bke.adapters.bus.streams import ensure_streams
from bke.adapters.state.keys.dispatcher import heartbeat_cgroup_key, heartbeat_key, heartbeat_runtime_key
from bke.contracts.agent import AgentRuntime
from bke.contracts.agent_facts import MAX_HOSTS, HostFacts
from bke_dispatcher.app import create_service
from bke_dispatcher.settings import DispatcherSettings
from bke_upgrader.agent_facts import AgentFactsClient, AgentFactsUnavailable

pytestmark = pytest.mark.integration
C = "facts"
AT = "2026-01-02T03:04:05+00:00"
WHEN = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
RUNTIME = AgentRuntime(agent_version="1.2.3", python="3.11", machine="x86_64", libc="glibc", libc_version="2.36")


async def test_the_upgrader_asks_a_real_dispatcher_for_its_agents_facts(nats_url, redis_url, redis_client, nats_client):
    await ensure_streams(nats_client.jetstream())
    hosts = [f"n{i}" for i in range(2 * MAX_HOSTS + 1)]  # three chunks
    # what the dispatcher's heartbeats recorded (bke_dispatcher.wiring.heartbeats): every host beat,
    # every other one reported cgroup v1, and one host its runtime
    await redis_client.hset(heartbeat_key(C), mapping=dict.fromkeys(hosts, AT))
    await redis_client.hset(heartbeat_cgroup_key(C), mapping={h: str(1 + i % 2) for i, h in enumerate(hosts)})
    await redis_client.hset(heartbeat_runtime_key(C), "n7", RUNTIME.model_dump_json(by_alias=True))
    asked: list[str] = []

    async def request(subject: str, payload: bytes, timeout: float) -> bytes:
        asked.append(subject)
        return (await nats_client.request(subject, payload, timeout=timeout)).data

    svc = create_service(DispatcherSettings(nats_url=nats_url, redis_url=redis_url, owner="facts", mode="lab",
                                            health_interval_s=0))
    await svc.start()
    try:
        got = await AgentFactsClient(request, 10.0).get(C, [*hosts, "stranger"])
    finally:
        await svc.stop()
    assert len(asked) == 3
    assert got["n7"] == HostFacts(hostname="n7", last_heartbeat=WHEN, cgroup_version=2, runtime=RUNTIME)
    assert [got[h].cgroup_version for h in hosts[:4]] == [1, 2, 1, 2]
    assert all(got[h].last_heartbeat == WHEN for h in hosts)
    assert got["stranger"] == HostFacts(hostname="stranger")  # never beat: nothing known

    with pytest.raises(AgentFactsUnavailable, match="no answer on bke.v1.agent-facts.get"):  # no dispatcher runs
        await AgentFactsClient(request, 1.0).get(C, ["n1"])
