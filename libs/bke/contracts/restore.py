"""etcd disaster recovery on the bus: the request, its answer, the progress, the snapshot's delivery.

`RestoreEtcd` (a command, `bke.v1.etcd.restore`) asks the upgrader to restore one etcd cluster
of a cluster from a stored snapshot (bke.core.etcdsnap): every kube-apiserver stops, every member
stops, each member is restored from the snapshot as a member of a new cluster, the members start
and are waited for (health needs a leader, so quorum), the apiservers start. The upgrader
answers once with `EtcdRestoreAccepted` (what stops, every stage; with `dry_run` nothing starts:
that is what `bke etcd restore` prints before it asks for confirmation) or
`EtcdRestoreRejected`. While it runs, `EtcdRestoreChanged` on
`bke.v1.etcd-restore.<cluster>.changed` carries the whole view on every transition.

The snapshot reaches a member's node through `GetRestorePiece` (core NATS request/reply, not
stored): the member's agent asks the upgrader for each piece in turn, the upgrader answers
with that piece re-sealed to the agent key BKE provisioned for the node (`RestorePiece`); the
clear snapshot is never on the bus or in Redis (bke.adapters.etcdsnap.delivery).

`GetEtcdRestore` (core NATS request/reply on `bke.v1.etcd-restore.get`, not stored) asks the
upgrader for the cluster's current or last restore: `EtcdRestoreView`, or a `StatusError`
(`NotFound`: no restore was ever run; `Invalid`: the request names a wrong field;
`Unavailable`: the upgrader could not read its record). `bke etcd restore status NAME` asks it.
"""
from __future__ import annotations

from pydantic import Field

from .base import Message, OperationChanged, changed_subject
from .channel import Channel
from .status import StatusError
from .statuses import NodeStatus, OperationStatus

__all__ = [
    "CHANNELS",
    "RESTORE_ACCEPTED",
    "RESTORE_ETCD",
    "RESTORE_GET",
    "RESTORE_PIECE",
    "RESTORE_REJECTED",
    "EtcdRestoreAccepted",
    "EtcdRestoreChanged",
    "EtcdRestoreRejected",
    "EtcdRestoreView",
    "GetEtcdRestore",
    "GetRestorePiece",
    "RestoreEtcd",
    "RestoreNode",
    "RestorePiece",
    "RestoreStageView",
    "restore_piece_subject",
    "restore_subject",
]

RESTORE_ETCD = "bke.v1.etcd.restore"
RESTORE_ACCEPTED = "bke.v1.etcd-restore.accepted"
RESTORE_REJECTED = "bke.v1.etcd-restore.rejected"
RESTORE_PIECE = "bke.v1.etcd-restore.piece.{cluster}.{node}"
RESTORE_GET = "bke.v1.etcd-restore.get"

RestoreStatus = OperationStatus
StageStatus = NodeStatus  # a stage waits, runs and ends, as a node does
_ID = r"^[A-Za-z0-9._:@-]+$"


def restore_subject(cluster: str) -> str:
    return changed_subject("etcd-restore", cluster)


def restore_piece_subject(cluster: str, node_token: str) -> str:
    """Where a member's agent asks for the snapshot (its node token: bke.contracts.agent.node_token)."""
    return RESTORE_PIECE.format(cluster=cluster, node=node_token)


class RestoreEtcd(Message):
    """Restore `etcd_cluster` of `cluster` from stored snapshot `snapshot_id` (disaster recovery,
    asked for by a person: a snapshot is never restored automatically)."""

    request_id: str = Field(min_length=1, max_length=128, pattern=_ID)
    cluster: str = Field(min_length=1, max_length=63)
    etcd_cluster: str = Field(min_length=1, max_length=63)
    snapshot_id: str = Field(pattern=r"^[a-z0-9][a-z0-9.-]{0,127}$")
    dry_run: bool = False  # answer with what it would stop and do, start nothing


class RestoreStageView(Message):
    name: str  # a row of bke.core.etcdsnap.restore.STAGES
    summary: str
    status: StageStatus = StageStatus.PENDING
    nodes: list[str] = []
    done: int = 0


class EtcdRestoreAccepted(Message):
    request_id: str
    cluster: str
    etcd_cluster: str
    snapshot_id: str
    revision: int = 0  # the snapshot's (its record)
    taken_at: str = ""
    token: str  # the new cluster's --initial-cluster-token
    stops: list[str]  # one line per pod it stops: every kube-apiserver, every member
    stages: list[RestoreStageView]
    dry_run: bool = False


class EtcdRestoreRejected(Message):
    request_id: str
    cluster: str
    message: str


class RestoreNode(Message):
    hostname: str
    stage: str
    failed_step: str = ""
    stderr: str = ""


class EtcdRestoreView(Message):
    request_id: str
    etcd_cluster: str
    snapshot_id: str
    status: RestoreStatus
    stages: list[RestoreStageView]
    stage: str = ""  # the stage running now (or where it stopped)
    started_at: str
    finished_at: str = ""
    message: str = ""
    failed: list[RestoreNode] = []


class EtcdRestoreChanged(OperationChanged):
    restore: EtcdRestoreView


class GetRestorePiece(Message):
    """Request (a member's agent): piece `index` of the snapshot of restore `restore_id`."""

    restore_id: str = Field(min_length=1, max_length=200)
    cluster: str
    node: str
    index: int = Field(ge=0)


class RestorePiece(Message):
    """Reply: one frame of bke.core.etcdsnap.sealed_stream, sealed to the asking node's provisioned
    agent key (base64); `last` on the final one. A refusal is a `StatusError`."""

    restore_id: str
    index: int
    frame_b64: str
    last: bool = False


class GetEtcdRestore(Message):
    """Which cluster's current or last etcd restore to answer with."""

    cluster: str = Field(min_length=1, max_length=63)


CHANNELS: tuple[Channel, ...] = (
    Channel(RESTORE_ETCD, RestoreEtcd, "command", "Restore one etcd cluster from a stored snapshot (disaster recovery, asked for by a person; with dryRun, only answer what it would stop and do).", ("cli",), ("upgrader",)),
    Channel(RESTORE_ACCEPTED, EtcdRestoreAccepted, "event", "A restore request was accepted (or, dry run, would be): every pod it stops and every stage.", ("upgrader",), ("cli",)),
    Channel(RESTORE_REJECTED, EtcdRestoreRejected, "event", "A restore request was refused, with the reason (another operation runs, no such snapshot or etcd cluster, a snapshot not from the node's provisioned agent).", ("upgrader",), ("cli",)),
    Channel("bke.v1.etcd-restore.{cluster}.changed", EtcdRestoreChanged, "event", "A restore started, moved a stage or node on, or finished (the whole view each time).", ("upgrader",), ("cli",)),
    Channel(RESTORE_GET, GetEtcdRestore, "request", "The cluster's current or last etcd restore, served by the upgrader (queue group upgrader-get; core NATS, not stored): `bke etcd restore status`.", ("cli",), ("upgrader",), (EtcdRestoreView, StatusError), reads=True),
    Channel(RESTORE_PIECE, GetRestorePiece, "request", "A member's agent asks for the next piece of the snapshot it restores, re-sealed to its provisioned key (core NATS, not stored).", ("agent",), ("upgrader",), (RestorePiece, StatusError)),
)
