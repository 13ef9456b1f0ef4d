"""Reset and delete a cluster: BKE's own `kubeadm reset`, node by node.

`ResetCluster` (a command on `bke.v1.cluster.reset`) goes to the dispatcher. It answers
`ResetAccepted` or `ResetRejected` (another operation runs, the cluster is paused or unknown, a
node is not in the plan) and then `ResetChanged` on `bke.v1.reset.<cluster>.changed` with the
whole view at every transition (as rotations do). Order: a snapshot of every etcd cluster
first (kept in BKE's object store, never on a node), then a `ResetNode` step per node:
workers first, etcd members last.

A delete (`delete: true`) resets every node, then the dispatcher publishes `ClusterDeleted`
on `bke.v1.cluster.deleted`; each service that keeps records of a cluster (`DELETE_OWNERS`)
removes ITS OWN keys and answers `StateRemoved` on `bke.v1.delete.<cluster>.removed` naming
itself; the CLI waits for all of them. Snapshots stay in the object store.
"""
from __future__ import annotations

from pydantic import Field

from .base import Message, OperationChanged, changed_subject
from .channel import Channel
from .statuses import NodeStatus, OperationStatus, RunStatus

__all__ = [
    "CHANNELS",
    "CLUSTER_DELETED",
    "DELETE_OWNERS",
    "RESET_ACCEPTED",
    "RESET_CLUSTER",
    "RESET_REJECTED",
    "ClusterDeleted",
    "ResetAccepted",
    "ResetChanged",
    "ResetCluster",
    "ResetNodeView",
    "ResetRejected",
    "ResetSnapshotView",
    "ResetView",
    "StateRemoved",
    "removed_subject",
    "reset_subject",
]

RESET_CLUSTER = "bke.v1.cluster.reset"
RESET_ACCEPTED = "bke.v1.reset.accepted"
RESET_REJECTED = "bke.v1.reset.rejected"
CLUSTER_DELETED = "bke.v1.cluster.deleted"
DELETE_OWNERS = ("planner", "certs", "renderer", "dispatcher", "upgrader")  # each removes its own records

_CLUSTER = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
ResetStatus = OperationStatus


def reset_subject(cluster: str) -> str:
    return changed_subject("reset", cluster)


def removed_subject(cluster: str) -> str:
    return f"bke.v1.delete.{cluster}.removed"


class ResetCluster(Message):
    request_id: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:@-]+$")
    cluster: str = Field(min_length=1, max_length=63, pattern=_CLUSTER)
    nodes: list[str] = Field(default_factory=list, max_length=10000)  # empty: every node
    delete: bool = False  # reset every node, then every service removes its records of the cluster


class ResetAccepted(Message):
    request_id: str
    cluster: str
    nodes: list[str]  # in the order they are reset
    delete: bool = False


class ResetRejected(Message):
    request_id: str
    cluster: str
    message: str


class ResetSnapshotView(Message):
    etcd_cluster: str
    status: RunStatus
    node: str = ""  # the member asked
    snapshot_id: str = ""
    reason: str = ""  # why it was skipped or failed


class ResetNodeView(Message):
    hostname: str
    status: NodeStatus


class ResetView(Message):
    request_id: str
    status: ResetStatus
    delete: bool
    done: int
    total: int
    started_at: str
    finished_at: str = ""
    message: str = ""
    snapshots: list[ResetSnapshotView]
    nodes: list[ResetNodeView]


class ResetChanged(OperationChanged):
    reset: ResetView


class ClusterDeleted(Message):
    """Every node of the cluster is reset: each service removes its own records of it."""

    request_id: str
    cluster: str = Field(min_length=1, max_length=63, pattern=_CLUSTER)


class StateRemoved(Message):
    request_id: str
    cluster: str
    service: str
    keys: int  # how many keys it removed (0 on a redelivery)
    at: str


CHANNELS: tuple[Channel, ...] = (
    Channel(RESET_CLUSTER, ResetCluster, "command", "Reset a cluster's nodes (all, or those named) or delete the cluster: etcd snapshots first, then the nodes, workers first and etcd members last.", ("cli",), ("dispatcher",)),
    Channel(RESET_ACCEPTED, ResetAccepted, "event", "A reset or delete started (the nodes in the order they are reset).", ("dispatcher",), ("cli",)),
    Channel(RESET_REJECTED, ResetRejected, "event", "A reset or delete was refused: another operation runs, the cluster is paused or unknown, a node is not in the plan.", ("dispatcher",), ("cli",)),
    Channel("bke.v1.reset.{cluster}.changed", ResetChanged, "event", "A reset's snapshots or nodes moved on, or it finished (the whole view each time).", ("dispatcher",), ("cli",)),
    Channel(CLUSTER_DELETED, ClusterDeleted, "event", "Every node of a deleted cluster is reset: each service removes its own records of it.", ("dispatcher",), ("planner", "certs", "renderer", "dispatcher", "upgrader")),
    Channel("bke.v1.delete.{cluster}.removed", StateRemoved, "event", "A service removed its records of a deleted cluster (one event per service).", ("planner", "certs", "renderer", "dispatcher", "upgrader"), ("cli",)),
)
