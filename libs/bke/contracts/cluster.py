"""Cluster requests and the planner's answers (the external contract of an install)."""
from __future__ import annotations

from pydantic import Field, model_validator

from .base import ErrorItem, Message, OneSpecSource
from .channel import Channel

__all__ = ["CHANNELS", "CLUSTER_REJECTED", "INSTALL_CLUSTER", "LEGACY_CLUSTER_REQUESTED", "PLAN_CREATED",
           "InstallCluster", "ClusterRejected", "PlanCreated"]

INSTALL_CLUSTER = "bke.v1.cluster.install"
CLUSTER_REJECTED = "bke.v1.cluster.rejected"
PLAN_CREATED = "bke.v1.plan.created"
# Commands are imperative: this one of earlier releases was named like an event. It stays accepted
# by the planner, with a warning per message, until bke.v2 (bke.contracts.subjects.LEGACY_COMMANDS).
LEGACY_CLUSTER_REQUESTED = "bke.v1.cluster.requested"  # now INSTALL_CLUSTER


class InstallCluster(OneSpecSource):
    """Command: plan (and install) this cluster. `specRef` = `<bucket>/<key>` in the
    JetStream object store, for specs larger than one message."""

    request_id: str = Field(min_length=1, max_length=128)
    spec: str | None = None
    spec_ref: str | None = None

    @model_validator(mode="after")
    def _ref_names_a_bucket(self) -> "InstallCluster":
        if self.spec_ref is not None and self.spec_ref.count("/") < 1:
            raise ValueError("specRef must be '<bucket>/<key>'")
        return self


class ClusterRejected(Message):
    request_id: str | None
    cluster: str | None
    errors: list[ErrorItem]


class PlanCreated(Message):
    """Event: the plan is stored under `planKey` (Redis); it is too large to travel here."""

    request_id: str
    cluster: str
    plan_key: str
    plan_digest: str
    nodes: int
    etcd_clusters: list[str]
    warnings: list[str] = []


CHANNELS: tuple[Channel, ...] = (
    Channel(INSTALL_CLUSTER, InstallCluster, "command", "Plan and install a cluster from a BKECluster + BKENode spec.", ("cli",), ("planner",)),
    Channel(CLUSTER_REJECTED, ClusterRejected, "event", "A request was refused; every error names its field.", ("planner",), ("cli",)),
    Channel(PLAN_CREATED, PlanCreated, "event", "A placement plan is stored; read by certs, renderer and dispatcher (and by the CLI that asked for it).", ("planner",), ("certs", "renderer", "dispatcher", "cli")),
    Channel(LEGACY_CLUSTER_REQUESTED, InstallCluster, "command", "Deprecated name of bke.v1.cluster.install, accepted until bke.v2.", (), ("planner",),
            external="sent only by CLIs and tooling of earlier releases"),
)
