"""Certificate rotation: renewed files delivered to the nodes that hold them, one node at a time.

The dispatcher publishes `RotationChanged` on `bke.v1.rotation.<cluster>.changed` on every
transition (started, a node done, finished); it carries the whole view, so a follower that
joins late needs nothing else. The certs service listens too: a finished rotation ends the
cluster's operation, and automatic renewal may run again.
"""
from __future__ import annotations

from .base import Message, OperationChanged, changed_subject
from .channel import Channel
from .statuses import NodeStatus, OperationStatus

__all__ = [
    "CHANNELS",
    "ROTATION_STATUSES",
    "RotationChanged",
    "RotationNode",
    "RotationStatus",
    "RotationView",
    "rotation_subject",
]

ROTATION_STATUSES = tuple(OperationStatus)
RotationStatus = OperationStatus


def rotation_subject(cluster: str) -> str:
    return changed_subject("rotation", cluster)


class RotationNode(Message):
    hostname: str
    status: NodeStatus


class RotationView(Message):
    """What `bke status` shows of a cluster's last rotation."""

    request_id: str
    status: RotationStatus
    certificates: list[str]  # instance ids, e.g. "apiserver@m1"
    done: int
    total: int
    started_at: str
    finished_at: str = ""
    message: str = ""
    nodes: list[RotationNode]


class RotationChanged(OperationChanged):
    rotation: RotationView


CHANNELS: tuple[Channel, ...] = (
    Channel("bke.v1.rotation.{cluster}.changed", RotationChanged, "event", "A certificate rotation started, moved one node on, or finished (the whole view each time).", ("dispatcher",), ("cli", "certs")),
)
