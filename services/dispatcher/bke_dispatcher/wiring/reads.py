"""What others read from the dispatcher: /metrics, the dashboard, the cluster status every client
asks for (`bke.v1.status.get`), the public half of the command key (an agent is provisioned
with it), and the facts the agents' heartbeats report (`bke.v1.agent-facts.get`, which the
upgrader asks: no other service reads the heartbeat keys). The requests are answered by
bke.adapters.bus.responder (the agent facts' registered here, the others' in app.py); while the
state is lost, the status, the agent facts and the dashboard answer Unavailable."""
from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Literal

from redis.asyncio import Redis

from bke.adapters.bus.responder import Answer, serve_requests, typed_answer
from bke.adapters.state.command_signing import CommandSigning
from bke.adapters.state.epoch import EpochWatch
from bke.adapters.state.keys.dispatcher import heartbeat_cgroup_key, heartbeat_key, heartbeat_runtime_key
from bke.contracts.agent import AgentRuntime, CommandKey
from bke.contracts.agent_facts import AGENT_FACTS_GET, AGENT_FACTS_QUEUE, AgentFacts, GetAgentFacts, HostFacts
from bke.contracts.status import StatusError

from ..dashboard import DashboardReader, dashboard_routes
from ..metrics import watch_metrics
from ..ops.rotation.run import RotationStore
from ..status import StatusReader, StatusResponder
from .basics import Basics

__all__ = ["COMMAND_KEY_QUEUE", "AgentFactsReader", "agent_facts_answer", "command_key_answer", "host_facts", "wire_reads"]

log = logging.getLogger("bke.dispatcher")
COMMAND_KEY_QUEUE = "dispatcher-command-key"
_CGROUPS: dict[str, Literal[1, 2]] = {"1": 1, "2": 2}  # as wiring/heartbeats.py writes them


def wire_reads(b: Basics, epoch: EpochWatch) -> StatusResponder:
    """/metrics, the dashboard and the agent facts' request registered; the responder of the
    status request returned."""
    watch_metrics(b.svc, b.redis, b.plans)  # /metrics: installs, phases, nodes, commands in flight
    reader = StatusReader(b.redis, b.plans, rotation=RotationStore(b.redis).rotation_view)
    b.svc.http_routes.extend(dashboard_routes(DashboardReader(reader, b.state, b.plans, b.events, b.now,
                                                              guard=epoch.ensure_intact)))
    serve_requests(b.svc, AGENT_FACTS_GET, AGENT_FACTS_QUEUE, agent_facts_answer(b.redis, guard=epoch.ensure_intact))
    return StatusResponder(reader, guard=epoch.ensure_intact)


def agent_facts_answer(redis: Redis, guard: Callable[[], None] = lambda: None) -> Answer:
    """The answer to `bke.v1.agent-facts.get`, bytes to bytes: a request that is no GetAgentFacts
    is answered Invalid naming its field, any other the AgentFactsReader's way."""
    return typed_answer(GetAgentFacts, AgentFactsReader(redis, guard).answer,
                        lambda why: StatusError(reason="Invalid", message=why))


def command_key_answer(signing: CommandSigning) -> Callable[[str, bytes], Awaitable[bytes]]:
    """The answer to `bke.v1.agents.command-key`, whatever was asked: the public half only."""

    async def answer(subject: str, body: bytes) -> bytes:
        signer = await signing.signer()
        return CommandKey(public_line=signer.verify_key.public_line, key_id=signer.key_id).to_bytes()

    return answer


def _text(raw: object) -> str | None:
    return raw.decode() if isinstance(raw, bytes) else None if raw is None else str(raw)


def host_facts(host: str, at: object, cgroup: object, runtime: object) -> HostFacts:
    """Pure: one host's facts from the values its heartbeats recorded (wiring/heartbeats.py;
    None: none recorded). A value that does not read as what is written there is not known,
    never guessed: it is left out of the answer rather than failing it."""
    when = _text(at)
    try:
        last = datetime.fromisoformat(when) if when is not None and len(when) <= 64 else None
    except ValueError:
        last = None
    if last is not None and last.tzinfo is None:  # a time without its zone compares with none
        last = None
    try:
        rt = AgentRuntime.model_validate_json(_text(runtime) or "")
    except ValueError:
        rt = None
    return HostFacts(hostname=host, last_heartbeat=last, cgroup_version=_CGROUPS.get(_text(cgroup) or ""), runtime=rt)


class AgentFactsReader:
    """The handler of `bke.v1.agent-facts.get`: the asked hosts' facts in one round trip; an
    outage or a lost state is an answer (Unavailable), never a raised error (the subscription
    lives on, the upgrader asks again)."""

    def __init__(self, redis: Redis, guard: Callable[[], None] = lambda: None):
        self.redis = redis
        self.guard = guard  # raises while the state is lost (bke.adapters.state.epoch)

    async def answer(self, req: GetAgentFacts) -> AgentFacts | StatusError:
        try:
            self.guard()
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.hmget(heartbeat_key(req.cluster), req.hosts)
                pipe.hmget(heartbeat_cgroup_key(req.cluster), req.hosts)
                pipe.hmget(heartbeat_runtime_key(req.cluster), req.hosts)
                beats, cgroups, runtimes = await pipe.execute()
        except Exception as exc:  # noqa: BLE001 - answered: the asker retries, this subscription lives on
            log.warning("agent facts not read: %s: %s", type(exc).__name__, exc,
                        extra={"cluster": req.cluster, "rate_key": "agent-facts-unavailable"})
            return StatusError(reason="Unavailable", cluster=req.cluster, message=f"{type(exc).__name__}: {exc}"[:500])
        return AgentFacts(cluster=req.cluster, hosts=[host_facts(*row) for row in zip(req.hosts, beats, cgroups, runtimes)])
