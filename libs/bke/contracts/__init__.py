"""Message contracts: pydantic models and their versioned subjects, in one place."""
from .base import ErrorItem, Message
from .cluster import ClusterRejected, InstallCluster, PlanCreated
from .deadletter import DeadLettered
from .subjects import CHANNELS, CLUSTER_REJECTED, INSTALL_CLUSTER, DEADLETTER, PLAN_CREATED, Channel

__all__ = [
    "CHANNELS",
    "CLUSTER_REJECTED",
    "INSTALL_CLUSTER",
    "DEADLETTER",
    "PLAN_CREATED",
    "Channel",
    "ClusterRejected",
    "InstallCluster",
    "DeadLettered",
    "ErrorItem",
    "Message",
    "PlanCreated",
]
