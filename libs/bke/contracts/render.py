"""Rendered node files: stored per node in Redis (`bke:<cluster>:files:render`)."""
from __future__ import annotations

from .base import FailureKind, Message

__all__ = ["ManifestsRendered", "RenderFailed", "RenderManifests", "MANIFESTS_RENDERED", "RENDER_FAILED", "RENDER_MANIFESTS"]

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
    after a rendering failure). Answered like a plan: `manifests.rendered` or `manifests.failed`."""

    request_id: str
    cluster: str
