"""Rendered node files: stored per node in Redis (`bke:<cluster>:files:render`)."""
from __future__ import annotations

from typing import Any

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from .base import FailureKind, Message, without_none
from .channel import Channel
from .membership import MAX_NODES, MembershipEtcdJoin

__all__ = ["CHANNELS", "ManifestsRendered", "RenderFailed", "RenderManifests", "MANIFESTS_RENDERED", "RENDER_FAILED", "RENDER_MANIFESTS"]

MANIFESTS_RENDERED = "bke.v1.manifests.rendered"
RENDER_FAILED = "bke.v1.manifests.failed"
RENDER_MANIFESTS = "bke.v1.manifests.render"


class ManifestsRendered(Message):
    request_id: str
    cluster: str
    digest: str
    nodes: int
    files: int
    tier: str
    template_sets: list[str]
    warnings: list[str] = []
    plan_digest: str = ""  # the plan these files were rendered from: a stale event is ignored


class RenderFailed(Message):
    request_id: str
    cluster: str
    errors: list[str]
    kind: FailureKind = "operational"
    plan_digest: str = ""


class RenderManifests(Message):
    """Command: render the cluster's stored plan again (sent by the dispatcher on `bke retry`
    after a rendering failure, and for a join of new nodes). Answered like a plan:
    `manifests.rendered` or `manifests.failed`."""

    request_id: str
    cluster: str
    # Members that join their running etcd cluster (a join's etcd-only nodes, JoinNodes.etcd_joins):
    # their manifests are rendered with `--initial-cluster-state=existing` and exactly this
    # `initial_cluster` (bke.core.render.EtcdJoin). Left out of the body when unset, so that a reader
    # from before the field still reads every other render request.
    etcd_joins: list[MembershipEtcdJoin] | None = Field(None, max_length=MAX_NODES)

    @model_serializer(mode="wrap")
    def _added_fields_only_when_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return without_none(handler(self), self, ("etcd_joins",))


CHANNELS: tuple[Channel, ...] = (
    Channel(MANIFESTS_RENDERED, ManifestsRendered, "event", "Every node's files are rendered, validated and stored.", ("renderer",), ("dispatcher",)),
    Channel(RENDER_FAILED, RenderFailed, "event", "Rendering a plan failed (unsupported version, refused flag, invalid output); the install fails with this reason.", ("renderer",), ("dispatcher",)),
    Channel(RENDER_MANIFESTS, RenderManifests, "command", "Render the stored plan again (a retry after a rendering failure; after an upgrade, its new plan).", ("dispatcher", "upgrader"), ("renderer",)),
)
