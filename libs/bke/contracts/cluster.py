"""Cluster requests and the planner's answers (the external contract of an install)."""
from __future__ import annotations

from pydantic import Field, model_validator

from .base import ErrorItem, Message, OneSpecSource

__all__ = ["InstallCluster", "ClusterRejected", "PlanCreated"]


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
