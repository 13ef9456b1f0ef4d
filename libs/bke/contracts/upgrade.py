"""Rolling upgrades: the request, its answer, and the operation's progress.

`UpgradeCluster` (a command, `bke.v1.cluster.upgrade`, imperative like `bke.v1.cluster.install`)
asks the upgrader to take a cluster to new versions. The upgrader answers once with
`UpgradeAccepted` (the plan of steps and the checks' findings; with `dry_run` nothing starts:
that is `bke upgrade plan --nats`) or `UpgradeRejected` (every refusing finding, by check name).
While an upgrade runs, `UpgradeChanged` on `bke.v1.upgrade.<cluster>.changed` carries the whole
view on every transition (a step started or ended, a batch done, a node failed or rolled back),
so a follower that joins late needs nothing else; `bke.v1.upgrade.get` answers the same view.

`RetryUpgrade` (`bke.v1.cluster.retry-upgrade`, imperative like `bke.v1.cluster.retry`) completes
a finished upgrade on nodes it left behind (left out, failed, rolled back, not reached): a new
run with its own request id, only those nodes. It is answered like an upgrade request:
`UpgradeAccepted` (with `retryOf` and `nodes`) or `UpgradeRejected` (e.g. a node that is not
behind, with what it runs), then `UpgradeChanged` until it ends.
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from .base import Message, OperationChanged, changed_subject, without_none
from .channel import Channel
from .drain import DrainOptions
from .status import StatusError
from .statuses import OperationStatus, RunStatus, UpgradeNodeStatus

__all__ = [
    "CHANNELS",
    "UPGRADE_ACCEPTED",
    "UPGRADE_CLUSTER",
    "UPGRADE_GET",
    "UPGRADE_REJECTED",
    "RETRY_UPGRADE",
    "GetUpgrade",
    "RetryUpgrade",
    "UpgradeAccepted",
    "UpgradeChanged",
    "UpgradeCluster",
    "UpgradeFinding",
    "UpgradeNode",
    "UpgradeRejected",
    "UpgradeStepView",
    "UpgradeVersions",
    "UpgradeView",
    "upgrade_subject",
]

UPGRADE_CLUSTER = "bke.v1.cluster.upgrade"
UPGRADE_ACCEPTED = "bke.v1.upgrade.accepted"
UPGRADE_REJECTED = "bke.v1.upgrade.rejected"
UPGRADE_GET = "bke.v1.upgrade.get"
RETRY_UPGRADE = "bke.v1.cluster.retry-upgrade"

UpgradeStatus = OperationStatus
StepStatus = RunStatus
NodeStatus = UpgradeNodeStatus
FindingKind = Literal["mandatory", "skippable", "notice"]

_VERSION = r"^v?[0-9]+\.[0-9]+\.[0-9]+$"


def upgrade_subject(cluster: str) -> str:
    return changed_subject("upgrade", cluster)


class UpgradeCluster(Message):
    """Take `cluster` to `kubernetes_version` (and the named etcd / containerd versions; unnamed
    ones default to the versions table's pairing for the target minor)."""

    request_id: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:@-]+$")
    cluster: str = Field(min_length=1, max_length=63)
    kubernetes_version: str = Field(pattern=_VERSION)
    etcd_version: str | None = Field(None, pattern=_VERSION)
    containerd_version: str | None = Field(None, pattern=_VERSION)
    # skippable checks to override, by name (kubeadm's --ignore-preflight-errors)
    ignore_checks: list[str] = Field(default_factory=list, max_length=32)
    max_unavailable: str | None = Field(None, max_length=8)  # "N" or "N%"; default max(1, 10%)
    drain_timeout_s: float = Field(300.0, gt=0, le=24 * 3600)
    renew_certificates: bool = True
    dry_run: bool = False  # answer with the plan and findings, start nothing
    # The etcd clusters of the spec the user upgrades with (`bke lab upgrade SPEC`, `--spec`):
    # compared with the installed ones, since an upgrade never splits etcd or merges it back.
    # None: the installed spec's.
    etcd_clusters: list[str] | None = Field(None, max_length=3)
    origin: Literal["cli", "bus"] = "cli"
    # what a drain may evict beyond kubectl's defaults (--force, --delete-emptydir-data)
    drain: DrainOptions | None = None

    @model_serializer(mode="wrap")
    def _added_fields_only_when_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return without_none(handler(self), self, ("drain",))


class RetryUpgrade(Message):
    """Upgrade `nodes` of `cluster` that its last upgrade left behind, to that upgrade's target
    (every node behind when `nodes` is empty)."""

    request_id: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:@-]+$")
    cluster: str = Field(min_length=1, max_length=63)
    nodes: list[str] = Field(default_factory=list, max_length=20_000)
    origin: Literal["cli", "bus"] = "cli"


class UpgradeVersions(Message):
    kubernetes: str
    etcd: str
    containerd: str


class UpgradeFinding(Message):
    name: str  # the check's name, as `--ignore-check` takes it
    kind: FindingKind
    message: str
    ignored: bool = False  # a skippable finding the request named in ignore_checks


class UpgradeStepView(Message):
    name: str  # a row of bke.core.upgrade.order.ORDER
    group: str = ""  # the etcd cluster of an etcd step
    status: StepStatus = StepStatus.PENDING
    done: int = 0  # nodes done in this step
    total: int = 0
    batches: int = 0


class UpgradeAccepted(Message):
    request_id: str
    cluster: str
    current: UpgradeVersions
    target: UpgradeVersions
    findings: list[UpgradeFinding]
    steps: list[UpgradeStepView]
    left_out: list[str] = []  # nodes whose agents are not alive (ignored AgentsAlive): upgraded later
    dry_run: bool = False
    retry_of: str = ""  # a RetryUpgrade's answer: the upgrade it completes
    nodes: list[str] = []  # a RetryUpgrade's answer: the only nodes it serves


class UpgradeRejected(Message):
    request_id: str
    cluster: str
    message: str
    findings: list[UpgradeFinding] = []  # the refusing ones (a malformed request has none)


class UpgradeNode(Message):
    hostname: str
    status: NodeStatus
    step: str  # the upgrade step the node was in
    failed_step: str = ""  # the agent step that failed
    stderr: str = ""


class UpgradeView(Message):
    request_id: str
    status: UpgradeStatus
    current: UpgradeVersions
    target: UpgradeVersions
    steps: list[UpgradeStepView]
    step: str = ""  # the step running now (or where it stopped)
    started_at: str
    finished_at: str = ""
    message: str = ""
    failed: list[UpgradeNode] = []  # failed or rolled-back nodes (at most 50)
    left_out: list[str] = []
    retry_of: str = ""  # a retry: the upgrade whose nodes left behind it completes


class UpgradeChanged(OperationChanged):
    upgrade: UpgradeView


class GetUpgrade(Message):
    cluster: str = Field(min_length=1, max_length=63)


CHANNELS: tuple[Channel, ...] = (
    Channel(UPGRADE_CLUSTER, UpgradeCluster, "command", "Upgrade a cluster to new versions (or, with dryRun, only answer with the plan and the checks' findings).", ("cli",), ("upgrader",)),
    Channel(RETRY_UPGRADE, RetryUpgrade, "command", "Complete the cluster's last upgrade on nodes it left behind (left out, failed, rolled back, not reached); answered like an upgrade request.", ("cli",), ("upgrader",)),
    Channel(UPGRADE_ACCEPTED, UpgradeAccepted, "event", "An upgrade request passed its checks: the steps it runs, every finding, the nodes left out.", ("upgrader",), ("cli",)),
    Channel(UPGRADE_REJECTED, UpgradeRejected, "event", "An upgrade request was refused: every refusing finding by check name (a malformed request: its field).", ("upgrader",), ("cli",)),
    Channel("bke.v1.upgrade.{cluster}.changed", UpgradeChanged, "event", "An upgrade (or the run of a changed spec, bke.v1.cluster.apply) started, moved a step or batch on, rolled a node back, or finished (the whole view each time).", ("upgrader",), ("cli",)),
    Channel(UPGRADE_GET, GetUpgrade, "request", "The cluster's current or last upgrade, served by the upgrader (queue group upgrader-get; core NATS, not stored).", ("cli",), ("upgrader",), (UpgradeView, StatusError), reads=True),
)
