"""What applying a changed spec to a running cluster would do: asked, never stored.

`DiffCluster` on `bke.v1.cluster.diff` (core NATS request/reply, queue group planner-diff) asks
the planner, which owns the stored plans, to place the spec and compare: the reply is
`ClusterChanges` (refusals by name, versions for the upgrader, the per-node actions in order and
the files that change on existing nodes) or a `StatusError` (no such cluster, invalid spec,
store away). Nothing changes anywhere: that is `bke apply --dry-run`.
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import ErrorItem, Message, OneSpecSource
from .channel import Channel
from .status import StatusError

__all__ = ["CHANNELS", "CHANGES_VERSION", "CLUSTER_DIFF", "DIFF_QUEUE", "ChangeAction", "ClusterChanges", "DiffCluster",
           "EtcdMembership", "NodeFileChanges", "parse_changes_reply"]

CLUSTER_DIFF = "bke.v1.cluster.diff"
DIFF_QUEUE = "planner-diff"
CHANGES_VERSION: Literal["bke.v1/ClusterChanges"] = "bke.v1/ClusterChanges"


class DiffCluster(OneSpecSource):
    request_id: str = Field(min_length=1, max_length=128)
    spec: str | None = None
    spec_ref: str | None = None  # `<bucket>/<key>` in the object store, for a large spec


class ChangeAction(Message):
    kind: str  # etcd-add-learner, etcd-promote, reissue-certificates, join, roll, apply-addons, ...
    host: str  # "" for the cluster as a whole
    detail: str = ""


class EtcdMembership(Message):
    cluster: str
    before: list[str]
    after: list[str]


class NodeFileChanges(Message):
    host: str  # "" for the addons
    added: list[str] = []
    removed: list[str] = []
    changed: list[str] = []


class ClusterChanges(Message):
    api_version: Literal["bke.v1/ClusterChanges"] = CHANGES_VERSION
    request_id: str
    cluster: str
    stored_digest: str
    desired_digest: str
    refusals: list[ErrorItem] = []  # path = the rule's name
    versions: dict[str, list[str]] = {}  # what -> [current, desired]: the upgrader's
    nodes_added: list[str] = []
    nodes_removed: list[str] = []
    roles_changed: dict[str, list[list[str]]] = {}
    etcd: list[EtcdMembership] = []
    certificates: dict[str, list[str]] = {}  # certificate instance -> what of its names changes
    files: list[NodeFileChanges] = []  # existing nodes only: a new node gets all, a removed one is reset
    actions: list[ChangeAction] = []
    # the quorum rule's input: "checked" = the dispatcher's latest health round was read, and
    # `etcdUnhealthy` lists the members it found unhealthy per etcd cluster; "unknown" = no
    # answer (every member is then taken as healthy, and `etcdHealthMessage` says why)
    etcd_health: Literal["checked", "unknown"] = "unknown"
    etcd_unhealthy: dict[str, list[str]] = {}
    etcd_health_message: str = ""


def parse_changes_reply(data: bytes) -> ClusterChanges | StatusError:
    """The planner's reply: the changes, or why there are none to show."""
    kind = ClusterChanges if b'"bke.v1/ClusterChanges"' in data else StatusError
    return kind.model_validate_json(data)


CHANNELS: tuple[Channel, ...] = (
    Channel(CLUSTER_DIFF, DiffCluster, "request", "What applying this spec to the running cluster would change, or why it is refused, answered by the planner from the stored plan (queue group planner-diff; core NATS, not stored; changes nothing): bke apply --dry-run.", ("cli",), ("planner",), (ClusterChanges, StatusError), reads=True),
)
