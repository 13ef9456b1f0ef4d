"""The dispatcher's heartbeats (bke_dispatcher.wiring.heartbeats) against a real Redis: a known
node's beat is written, its cgroup version and runtime only when they change; a beat on another
node's subject, of an unknown node, of a deleted cluster, while the state is lost, or that does
not parse writes nothing."""
from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone

import pytest
import redis.asyncio as aioredis

from bke.adapters.state.keys.dispatcher import health_key, heartbeat_cgroup_key, heartbeat_key, heartbeat_runtime_key
from bke.adapters.state.keys.plan import plan_key
from bke.contracts.agent import AgentHeartbeat, AgentRuntime, CommandResult, agent_subject
from bke_dispatcher.health import HealthMonitor
from bke_dispatcher.state import DispatcherState
from bke_dispatcher.wiring.forgotten import Forgotten
from bke_dispatcher.wiring.heartbeats import Heartbeats

pytestmark = pytest.mark.integration
C = "hb"
RUNTIME = AgentRuntime(agent_version="1.2.3", python="3.11", machine="x86_64")


@dataclass
class Msg:
    subject: str
    data: bytes


class Known:
    """The plan's nodes (KnownTargets reads them from the stored plan; here they are given)."""

    def __init__(self, nodes: set[str]):
        self.nodes = nodes

    async def has_node(self, cluster: str, node: str) -> bool:
        return cluster == C and node in self.nodes


class Epoch:
    lost = False


def beat(node: str, at: str, subject_node: str | None = None, **fields: object) -> Msg:
    body = AgentHeartbeat(cluster=C, node=node, agent_id="a", at=at, **fields).to_bytes()  # type: ignore[arg-type]
    return Msg(agent_subject(C, subject_node or node, "heartbeat"), body)


async def test_a_known_nodes_beat_is_written_and_what_it_reports_only_when_it_changes(
        redis_client: aioredis.Redis) -> None:
    beats = Heartbeats(redis_client, Known({"n1", "n2"}), Forgotten(redis_client), Epoch())  # type: ignore[arg-type]
    await beats.on_message(beat("n1", "t1", cgroup_version=2, runtime=RUNTIME))
    assert await redis_client.hgetall(heartbeat_key(C)) == {"n1": "t1"}
    assert await redis_client.hgetall(heartbeat_cgroup_key(C)) == {"n1": "2"}
    assert json.loads(await redis_client.hget(heartbeat_runtime_key(C), "n1"))["agentVersion"] == "1.2.3"
    # the same report again: only the beat is written (the others are not written back once gone)
    await redis_client.delete(heartbeat_cgroup_key(C), heartbeat_runtime_key(C))
    await beats.on_message(beat("n1", "t2", cgroup_version=2, runtime=RUNTIME))
    assert await redis_client.hgetall(heartbeat_key(C)) == {"n1": "t2"}
    assert await redis_client.exists(heartbeat_cgroup_key(C), heartbeat_runtime_key(C)) == 0
    # a changed report is written
    await beats.on_message(beat("n1", "t3", cgroup_version=1, runtime=RUNTIME))
    assert await redis_client.hgetall(heartbeat_cgroup_key(C)) == {"n1": "1"}


async def test_a_beat_that_is_not_believed_writes_nothing(redis_client: aioredis.Redis) -> None:
    epoch, forgotten = Epoch(), Forgotten(redis_client)
    beats = Heartbeats(redis_client, Known({"n1", "n2"}), forgotten, epoch)  # type: ignore[arg-type]
    before = set(await redis_client.keys("*"))
    await beats.on_message(beat("n1", "t1", subject_node="n2"))  # on another node's subject
    await beats.on_message(beat("ghost", "t1"))  # a node of no plan
    await beats.on_message(Msg(agent_subject(C, "n1", "heartbeat"), b"{not json"))
    await beats.on_message(Msg(agent_subject(C, "n1", "heartbeat"), b'{"cluster": "hb", "node": "n1"}'))
    epoch.lost = True  # nothing is written into a store that lost its state
    await beats.on_message(beat("n1", "t1"))
    epoch.lost = False
    forgotten.add(C)  # deleted since this process started, and not planned again
    await beats.on_message(beat("n1", "t1"))
    assert set(await redis_client.keys("*")) == before
    # planned again under the same name: its beats count again
    await redis_client.set(plan_key(C), "{}")
    await beats.on_message(beat("n1", "t2"))
    assert await redis_client.hgetall(heartbeat_key(C)) == {"n1": "t2"}


async def test_a_health_answer_counts_as_a_beat(redis_client: aioredis.Redis) -> None:
    """An agent's answer to a health command (the install's last phase, then every round) records
    the node alive as a beat does: an upgrade asked for right after an install finds every agent
    alive though their first beats, sent before the plan was stored, were dropped."""
    async def never(*_: object) -> None:
        raise AssertionError("a recorded answer publishes nothing")

    monitor = HealthMonitor(DispatcherState(redis_client), None, never, lambda: datetime.now(timezone.utc),  # type: ignore[arg-type]
                            30.0, sign=never)  # type: ignore[arg-type]
    res = CommandResult(command_id=f"{C}/health/n1/0", cluster=C, node="n1", status="Succeeded", steps=[], agent_id="a",
                        started_at="2026-12-05T09:59:59+00:00",
                        finished_at="2026-12-05T10:00:00+00:00")
    await monitor.record(res)
    assert await redis_client.hgetall(heartbeat_key(C)) == {"n1": "2026-12-05T10:00:00+00:00"}
    assert json.loads(await redis_client.hget(health_key(C), "n1"))["status"] == "Healthy"
