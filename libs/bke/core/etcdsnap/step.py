"""The `EtcdSnapshot` agent step for one member of one etcd cluster, from the plan.

Why the healthcheck-client certificate: it is the etcd client certificate every member's node
already holds in the cluster's own cert dir (bke.core.pki.table, `<etcd cluster>-healthcheck-client`,
signed by etcd-ca), so a snapshot needs no new key on the node. etcd runs without its own auth,
so any client certificate of etcd-ca may call Maintenance/Snapshot.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from bke.contracts.agent_steps import EtcdSnapshot, TlsFiles
from bke.core.plan.models import Plan
from .records import object_name, snapshot_id

__all__ = ["SnapshotTarget", "snapshot_step", "snapshot_targets"]


@dataclass(frozen=True)
class SnapshotTarget:
    """Which node snapshots which etcd cluster (the node is the member)."""

    etcd_cluster: str
    node: str


def snapshot_targets(plan: Plan) -> list[SnapshotTarget]:
    """One snapshot per etcd cluster, taken on its first member (split etcd: three)."""
    return [SnapshotTarget(c.name, c.members[0].hostname) for c in plan.etcd_clusters if c.members]


def snapshot_step(plan: Plan, etcd_cluster: str, member: str, recipient_b64: str, now: datetime,
                  request_id: str = "", timeout_s: float = 900.0) -> EtcdSnapshot:
    """The step that snapshots `member` of `etcd_cluster`; KeyError if the plan has no such member."""
    ec = plan.etcd_cluster(etcd_cluster)
    if ec is None:
        raise KeyError(f"cluster {plan.cluster} has no etcd cluster {etcd_cluster!r}")
    m = ec.member(member)
    if m is None:
        raise KeyError(f"{member} is no member of {etcd_cluster}")
    sid = snapshot_id(now, member)
    d = ec.cert_dir
    return EtcdSnapshot(
        id=f"etcd-snapshot/{etcd_cluster}", timeout_s=timeout_s, endpoint=m.client_url,
        tls=TlsFiles(ca=f"{d}/ca.crt", cert=f"{d}/healthcheck-client.crt", key=f"{d}/healthcheck-client.key"),
        etcd_cluster=etcd_cluster, member=member, snapshot_id=sid,
        object_name=object_name(plan.cluster, etcd_cluster, sid), recipient_b64=recipient_b64,
        request_id=request_id,
    )
