"""Message contracts: pydantic models and their versioned subjects, in one place."""
from .base import ErrorItem, Message
from .cluster import ClusterRejected, ClusterRequested, PlanCreated
from .deadletter import DeadLettered
from .subjects import CHANNELS, CLUSTER_REJECTED, CLUSTER_REQUESTED, DEADLETTER, PLAN_CREATED, Channel

__all__ = [
    "CHANNELS",
    "CLUSTER_REJECTED",
    "CLUSTER_REQUESTED",
    "DEADLETTER",
    "PLAN_CREATED",
    "Channel",
    "ClusterRejected",
    "ClusterRequested",
    "DeadLettered",
    "ErrorItem",
    "Message",
    "PlanCreated",
]
