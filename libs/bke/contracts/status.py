"""The status of a cluster's install, read over the bus: `bke status`, `bke retry`, `bke apply`
and the live display ask the dispatcher (core NATS request/reply on `STATUS_GET`), never Redis.

The reply is versioned by `apiVersion`: a `ClusterStatus`, or a `StatusError` (the cluster is
not found, the request is invalid, or the dispatcher could not read its state). Its JSON schema
is committed as `docs/status.schema.json` (`python -m bke.contracts.status_schema`); a test
fails when the two differ.

Size: a reply must stay under NATS' 1 MiB payload at any cluster size, so the node list is
chosen (`nodes`: none, failed, all) and paged (`offset`, `limit`); counts by status always
cover every node. What is per node (its applied labels and taints, its latest health answer)
travels on the node's row of that paged list; what covers every node travels as summaries
(`nodeHealth`: counts; `labelSets`: the distinct applied label-and-taint sets with their node
counts, the largest `MAX_LABEL_SETS`).
"""
from __future__ import annotations

from typing import Annotated, Any, Final, Literal, Union

from pydantic import Field, TypeAdapter, ValidationError

from .base import ErrorItem, Message
from .channel import Channel
from .install import FailureKind
from .membership import MembershipView
from .reset import ResetView
from .statuses import HealthStatus, InstallStatus, NodeStatus, OperationStatus, PhaseStatus

__all__ = [
    "CHANNELS",
    "CLUSTER_STATUS_VERSION",
    "ClusterStatus",
    "HealthCounts",
    "LabelSet",
    "MAX_LABEL_SETS",
    "NodeHealth",
    "NodeTaint",
    "NodeCounts",
    "NodeSelection",
    "OperationHolder",
    "Refusals",
    "RotationNode",
    "RotationStatus",
    "STATUS_ERROR_VERSION",
    "STATUS_GET",
    "STATUS_QUEUE",
    "StatusError",
    "StatusNode",
    "StatusPhase",
    "StatusReply",
    "GetStatus",
    "invalid_request",
    "parse_status_reply",
]

STATUS_GET = "bke.v1.status.get"
STATUS_QUEUE = "dispatcher-status"  # dispatcher replicas share the requests
CLUSTER_STATUS_VERSION: Final = "bke.v1/ClusterStatus"
STATUS_ERROR_VERSION: Final = "bke.v1/StatusError"
MAX_PAGE = 5000
MAX_LABEL_SETS = 50  # distinct label sets listed; users' per-node labels could make one per node

# "failed" (the default) lists the nodes worth looking at: failed and running ones; "unhealthy":
# the nodes whose latest health answer is Unhealthy (the planner's dry run reads the etcd members
# among them for the quorum rule)
NodeSelection = Literal["none", "failed", "all", "unhealthy"]


class GetStatus(Message):
    """Request: the status of one cluster. Nodes in plan order, paged by `offset`/`limit`."""

    cluster: str = Field(min_length=1, max_length=253)
    nodes: NodeSelection = "failed"
    offset: int = Field(0, ge=0)
    limit: int = Field(1000, ge=1, le=MAX_PAGE)


class StatusPhase(Message):
    name: str
    summary: str
    status: PhaseStatus
    started_at: str | None = None
    finished_at: str | None = None
    message: str = ""  # why it failed, or why it waits
    done: int = 0
    total: int = 0


class NodeTaint(Message):
    key: str
    value: str = ""
    effect: str


class NodeHealth(Message):
    """A node's latest health answer: its agent's health command (the kubelet's /healthz, and
    the etcd and control-plane endpoints it runs)."""

    status: HealthStatus
    failing: list[str] = []  # the failing checks' step ids, e.g. "health:kubelet"
    at: str | None = None


class StatusNode(Message):
    hostname: str
    status: NodeStatus
    phase: str | None = None  # the phase of its latest command
    step: str | None = None  # the failing step's id
    # what the node-labels phase applied to its Node object (recorded, in the lab); None: not
    # yet, or never (an etcd-only node does not register)
    labels: dict[str, str] | None = None
    taints: list[NodeTaint] | None = None
    health: NodeHealth | None = None  # None: not checked yet


class HealthCounts(Message):
    """Every node of the plan by its latest health answer (`unknown`: none yet)."""

    healthy: int = 0
    unhealthy: int = 0
    unknown: int = 0
    unhealthy_nodes: list[str] = []  # the first 20, in plan order


class LabelSet(Message):
    """One distinct set of applied labels and taints, and how many nodes carry it."""

    labels: dict[str, str]
    taints: list[NodeTaint] = []
    nodes: int


class NodeCounts(Message):
    """Every node of the plan, by status, whatever the node selection."""

    total: int = 0
    pending: int = 0
    running: int = 0
    succeeded: int = 0
    failed: int = 0


class RotationNode(Message):
    hostname: str
    status: NodeStatus


class RotationStatus(Message):
    """The latest certificate rotation of the cluster."""

    request_id: str
    status: OperationStatus
    certificates: list[str]
    done: int
    total: int
    started_at: str | None = None
    finished_at: str | None = None
    message: str = ""
    nodes: list[RotationNode] = []


class OperationHolder(Message):
    """The operation that holds the cluster's slot (one operation per cluster,
    bke.adapters.state.operation_slot): what runs now, and what any other request is refused for."""

    # a string, not an enum: a newer BKE's kind ("apply", ...) still reads in an older client
    kind: str  # install, upgrade, etcd-restore, rotation, reset, delete, apply
    request_id: str
    since: str
    detail: str = ""  # what of the cluster it works on, when not all of it (a restore's etcd cluster)


class Refusals(Message):
    """Commands agents refused and registrations the certs service refused (forged, unsigned,
    for another node, a key BKE did not provision): how many, and the last one."""

    count: int
    last_node: str = ""
    last_reason: str = ""
    last_at: str | None = None


class ClusterStatus(Message):
    api_version: Literal["bke.v1/ClusterStatus"] = CLUSTER_STATUS_VERSION
    cluster: str
    status: InstallStatus
    request_id: str
    started_at: str | None = None
    finished_at: str | None = None
    message: str = ""  # the failure reason
    # "invalid": the input was refused (CLIs exit 2); "operational": retry after a fix; None unless Failed
    kind: FailureKind | None = None
    nodes_changed: bool = False  # whether any command reached a node
    phases: list[StatusPhase]
    node_counts: NodeCounts
    node_selection: NodeSelection
    nodes: list[StatusNode]
    nodes_matched: int  # nodes of the selection, over every page
    next_offset: int | None = None  # the next page's offset; None on the last page
    addons: dict[str, dict[str, Any]] = {}  # addon name -> its apply record
    # cluster-wide health records ("kube-system": its pods by phase, where an apiserver answers);
    # each node's own answer is on its row (`nodes[].health`), summed up in `nodeHealth`
    health: dict[str, dict[str, Any]] = {}
    node_health: HealthCounts = HealthCounts()
    label_sets: list[LabelSet] = []  # largest first, at most MAX_LABEL_SETS
    labelled: int = 0  # nodes whose labels are applied (or recorded, in the lab)
    label_sets_more: int = 0  # distinct sets not listed
    rotation: RotationStatus | None = None  # None when there never was one
    refusals: Refusals | None = None  # None when nothing was ever refused
    # added in the same form (optional, None when absent: older replies still read)
    reset: ResetView | None = None  # the latest reset or delete; None when there never was one
    operation: OperationHolder | None = None  # the operation running now; None when none is
    # the running or last join of workers and removal of workers (each node's stage and outcome,
    # what it waits for); None when there never was one
    join: MembershipView | None = None
    removal: MembershipView | None = None


class StatusError(Message):
    api_version: Literal["bke.v1/StatusError"] = STATUS_ERROR_VERSION
    reason: Literal["NotFound", "Invalid", "Unavailable"]
    cluster: str | None = None
    message: str
    errors: list[ErrorItem] = []  # for "Invalid": each names its field


def invalid_request(exc: ValidationError, message: str, whole: str) -> StatusError:
    """The answer to a request that does not parse: each error names its field (`whole`: the
    path given to an error of the request as a whole)."""
    errors = [ErrorItem(path=".".join(str(p) for p in e["loc"]) or whole, message=e["msg"])
              for e in exc.errors(include_url=False)]
    return StatusError(reason="Invalid", message=message, errors=errors)


StatusReply = Annotated[Union[ClusterStatus, StatusError], Field(discriminator="api_version")]
_REPLY = TypeAdapter(StatusReply)


def parse_status_reply(data: bytes) -> ClusterStatus | StatusError:
    return _REPLY.validate_json(data)


CHANNELS: tuple[Channel, ...] = (
    Channel(STATUS_GET, GetStatus, "request", "The status of a cluster's install, served by the dispatcher (queue group dispatcher-status; core NATS, not stored); the upgrader asks it before an upgrade, the planner for a dry run's etcd health.", ("cli", "upgrader", "planner"), ("dispatcher",), (ClusterStatus, StatusError), reads=True),
)
