"""Every subject on the bus, versioned, with its message model and direction.

Commands are imperative, events past tense. The AsyncAPI document is generated from
`CHANNELS` (see `bke.contracts.asyncapi`), so it cannot drift from the code.
"""
from __future__ import annotations

from dataclasses import dataclass

from .base import Message
from .cluster import ClusterRejected, ClusterRequested, PlanCreated
from .agent import AgentCommand, AgentHeartbeat, AgentRegistered, CommandResult
from .deadletter import DeadLettered

__all__ = [
    "AGENT_SUBJECTS",
    "CHANNELS",
    "CLUSTER_REJECTED",
    "CLUSTER_REQUESTED",
    "COMMAND_SUBJECTS",
    "Channel",
    "DEADLETTER",
    "EVENT_SUBJECTS",
    "PLAN_CREATED",
]

CLUSTER_REQUESTED = "bke.v1.cluster.requested"
CLUSTER_REJECTED = "bke.v1.cluster.rejected"
PLAN_CREATED = "bke.v1.plan.created"
DEADLETTER = "bke.v1.deadletter"

# Stream membership. Subjects of one stream may not overlap another's, so events are
# listed one by one (the fixed external `bke.v1.cluster.*` pair sits in two streams).
COMMAND_SUBJECTS: tuple[str, ...] = (CLUSTER_REQUESTED, "bke.v1.certs.renew-requested", "bke.v1.cluster.retry-requested")
EVENT_SUBJECTS: tuple[str, ...] = (
    CLUSTER_REJECTED,
    PLAN_CREATED,
    "bke.v1.certs.issued",
    "bke.v1.certs.renewed",
    "bke.v1.certs.failed",
    "bke.v1.manifests.rendered",
    "bke.v1.manifests.failed",
    "bke.v1.install.>",
)
AGENT_SUBJECTS: tuple[str, ...] = ("bke.v1.agent.>",)


@dataclass(frozen=True)
class Channel:
    subject: str
    model: type[Message]
    kind: str  # "command" | "event"
    summary: str
    senders: tuple[str, ...]
    receivers: tuple[str, ...]


CHANNELS: tuple[Channel, ...] = (
    Channel(CLUSTER_REQUESTED, ClusterRequested, "command", "Plan and install a cluster from a BKECluster + BKENode spec.", ("cli",), ("planner",)),
    Channel(CLUSTER_REJECTED, ClusterRejected, "event", "A request was refused; every error names its field.", ("planner",), ("cli",)),
    Channel(PLAN_CREATED, PlanCreated, "event", "A placement plan is stored; read by certs, renderer and dispatcher.", ("planner",), ("certs", "renderer", "dispatcher")),
    Channel("bke.v1.agent.{cluster}.{node}.command", AgentCommand, "command", "Steps for one node's agent; secret files sealed to that agent.", ("dispatcher",), ("agent",)),
    Channel("bke.v1.agent.{cluster}.{node}.result", CommandResult, "event", "The agent ran (or replayed) a command.", ("agent",), ("dispatcher",)),
    Channel("bke.v1.agent.{cluster}.{node}.registered", AgentRegistered, "event", "An agent started and announces its public keys.", ("agent",), ("dispatcher", "certs")),
    Channel("bke.v1.heartbeat.{cluster}.{node}", AgentHeartbeat, "event", "Agent liveness (core NATS, not stored).", ("agent",), ("dispatcher",)),
    Channel(DEADLETTER + ".{service}", DeadLettered, "event", "A message a service gave up on after its maximum deliveries.", ("planner", "certs", "renderer", "dispatcher"), ()),
)

