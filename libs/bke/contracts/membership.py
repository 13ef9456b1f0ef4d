"""Workers joining and leaving a running cluster.

Both are commands to the dispatcher, sent by whoever changes the cluster (`bke apply`'s runner
in the upgrader; tests send them directly). Each is answered by one `*.finished` event
(Succeeded or Failed, with the reason and every node's outcome); a refusal is a `finished`
Failed with no node touched. Progress, the whole view at every transition, goes to
`bke.v1.join-nodes.<cluster>.changed` / `bke.v1.remove-nodes.<cluster>.changed`.

JoinNodes: the caller has already swapped in the plan (digest `planDigest`) that names the new
nodes; the dispatcher has their certificates issued and sealed and their files rendered for
that plan, then runs the install's per-node phases for those nodes only. No other node receives
a command.

RemoveNodes: workers only (an etcd member or a master is a control-plane scale-in: refused,
named). For each: cordon and drain, delete its Node object, reset it (`ResetNode`), forget it.
The stored plan must still name the nodes (their roles and agents are read from it); the caller
swaps in the plan without them afterwards. `finished` names the agents' bus identities to
revoke: the holder of the NATS authority revokes them (the lab's `bke lab remove-nodes`, or
`bke identities revoke NAME` in a deployment), as `bke delete` does.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from .base import FailureKind, Message, OperationChanged, changed_subject, without_none
from .channel import Channel
from .drain import DrainOptions
from .statuses import FinishedStatus, NodeStatus, OperationStatus

__all__ = [
    "CHANNELS",
    "JOIN_NODES",
    "JOIN_NODES_FINISHED",
    "REMOVE_NODES",
    "REMOVE_NODES_FINISHED",
    "JoinNodes",
    "MembershipRejoin",
    "JoinNodesChanged",
    "JoinNodesFinished",
    "MembershipEtcdJoin",
    "MembershipNode",
    "MembershipView",
    "RemoveNodes",
    "RemoveNodesChanged",
    "RemoveNodesFinished",
    "join_changed_subject",
    "remove_changed_subject",
]

JOIN_NODES = "bke.v1.cluster.join-nodes"
REMOVE_NODES = "bke.v1.cluster.remove-nodes"
JOIN_NODES_FINISHED = "bke.v1.join-nodes.finished"
REMOVE_NODES_FINISHED = "bke.v1.remove-nodes.finished"

_CLUSTER = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_REQUEST = r"^[A-Za-z0-9._:@-]+$"
Hostname = Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?$")]
MAX_NODES = 1000  # per request: a change of more nodes is split by the caller
# A plan component (bke.core.plan.models.COMPONENTS; tests/unit/dispatcher/test_membership_decisions.py holds
# the two lists equal: the contracts import nothing of the plan)
Component = Literal["containerd", "kubelet", "etcd-data", "etcd-events", "etcd-pods", "haproxy", "keepalived",
                    "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy"]
Outcome = FinishedStatus


def join_changed_subject(cluster: str) -> str:
    return changed_subject("join-nodes", cluster)


def remove_changed_subject(cluster: str) -> str:
    return changed_subject("remove-nodes", cluster)


class MembershipEtcdJoin(Message):
    """A new node that joins a running etcd cluster (`bke.core.render.context.EtcdJoin`): the caller
    has added it as a learner already; it starts with `--initial-cluster-state=existing` and
    exactly this `name=peerURL,...` list (etcd's runtime reconfiguration guide)."""

    etcd_cluster: str = Field(min_length=1, max_length=63, pattern=_CLUSTER)
    member: Hostname
    initial_cluster: str = Field(min_length=1, max_length=16384)


class MembershipRejoin(Message):
    """A node of `nodes` that is in the cluster already and joins again because its new roles
    add parts (`bke apply`: a worker becoming a master, a node becoming an etcd member):
    `running` is what it runs now. The join's phases are ensures, so what it has is left as it
    is; its preflight does not count the ports its running parts hold as taken."""

    hostname: Hostname
    running: list[Component] = Field(default_factory=list, max_length=16)


class JoinNodes(Message):
    request_id: str = Field(min_length=1, max_length=128, pattern=_REQUEST)
    cluster: str = Field(min_length=1, max_length=63, pattern=_CLUSTER)
    plan_digest: str = Field(min_length=64, max_length=64, pattern=r"^[0-9a-f]{64}$")
    nodes: list[Hostname] = Field(min_length=1, max_length=MAX_NODES)
    # The operation this join is a part of (`bke apply`'s run: its request id), which holds the
    # cluster's operation slot: the join runs inside that slot instead of claiming its own.
    part_of: str | None = Field(None, min_length=1, max_length=128, pattern=_REQUEST)
    # etcd-only nodes among `nodes` that join a running etcd cluster (already added as learners)
    etcd_joins: list[MembershipEtcdJoin] | None = Field(None, max_length=MAX_NODES)
    # nodes among `nodes` already in the cluster, joining again with more parts
    rejoin: list[MembershipRejoin] | None = Field(None, max_length=MAX_NODES)

    @model_serializer(mode="wrap")
    def _added_fields_only_when_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return without_none(handler(self), self, ("part_of", "etcd_joins", "rejoin"))


class RemoveNodes(Message):
    request_id: str = Field(min_length=1, max_length=128, pattern=_REQUEST)
    cluster: str = Field(min_length=1, max_length=63, pattern=_CLUSTER)
    nodes: list[Hostname] = Field(min_length=1, max_length=MAX_NODES)
    # as JoinNodes.part_of: the apply run that holds the slot
    part_of: str | None = Field(None, min_length=1, max_length=128, pattern=_REQUEST)
    drain: DrainOptions | None = None  # what a drain may evict beyond kubectl's defaults

    @model_serializer(mode="wrap")
    def _added_fields_only_when_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return without_none(handler(self), self, ("part_of", "drain"))


class MembershipNode(Message):
    hostname: str
    status: NodeStatus
    stage: str = ""  # the phase (join) or stage (removal) it is in, or last was in
    reason: str = ""  # why it failed


class MembershipView(Message):
    request_id: str
    status: OperationStatus
    started_at: str
    finished_at: str = ""
    message: str = ""
    waiting: str = ""  # why it is not moving (shown while Running)
    nodes: list[MembershipNode]


class JoinNodesChanged(OperationChanged):
    join: MembershipView


class RemoveNodesChanged(OperationChanged):
    removal: MembershipView


class _MembershipFinished(Message):
    """What a join's and a removal's `finished` event share; every node's outcome and the
    failure's `kind` follow in each (a join names its plan first). `kind`, Failed only:
    "invalid", the request was refused (nothing started: the CLI's exit 2); "operational", it
    failed (a node, a service, a record it cannot read, given up: exit 1). Left out of the body
    when unset (bke.contracts.base.without_none)."""

    request_id: str
    cluster: str
    status: Outcome
    reason: str = ""

    @model_serializer(mode="wrap")
    def _added_fields_only_when_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return without_none(handler(self), self, ("kind",))


class JoinNodesFinished(_MembershipFinished):
    plan_digest: str = ""
    nodes: list[MembershipNode] = []  # empty when refused
    kind: FailureKind | None = None
    at: str


class RemoveNodesFinished(_MembershipFinished):
    nodes: list[MembershipNode] = []  # empty when refused
    kind: FailureKind | None = None
    # the removed nodes' agents' bus identities (bke.adapters.auth.permissions.identity_name): to revoke
    revoke_identities: list[str] = []
    at: str


CHANNELS: tuple[Channel, ...] = (
    Channel(JOIN_NODES, JoinNodes, "command", "Join workers that the stored plan (digest planDigest) already names: their certificates issued and sealed, their files rendered, then the install's per-node phases on those nodes only.", ("cli", "upgrader"), ("dispatcher",)),
    Channel(JOIN_NODES_FINISHED, JoinNodesFinished, "event", "A join ended (Succeeded or Failed, each node's outcome); a refused join is Failed with the reason.", ("dispatcher",), ("cli", "upgrader")),
    Channel("bke.v1.join-nodes.{cluster}.changed", JoinNodesChanged, "event", "A join moved a node to its next phase, or waits, or ended (the whole view each time).", ("dispatcher",), ("cli",)),
    Channel(REMOVE_NODES, RemoveNodes, "command", "Remove workers: cordon and drain, delete the Node, reset the node, forget it (etcd members and masters refused, named).", ("cli", "upgrader"), ("dispatcher",)),
    Channel(REMOVE_NODES_FINISHED, RemoveNodesFinished, "event", "A removal ended (Succeeded or Failed, each node's outcome, the agents' identities to revoke); a refused one is Failed with the reason. The certs service forgets the removed nodes' agent keys, sealed bundles and PKI instances, the renderer their rendered files.", ("dispatcher",), ("cli", "upgrader", "certs", "renderer")),
    Channel("bke.v1.remove-nodes.{cluster}.changed", RemoveNodesChanged, "event", "A removal moved a node to its next stage, or ended (the whole view each time).", ("dispatcher",), ("cli",)),
)
