"""Rendered node files: stored per node in Redis (`bke:<cluster>:files:render`)."""
from __future__ import annotations

from .base import Message

__all__ = ["ManifestsRendered", "RenderFailed", "MANIFESTS_RENDERED", "RENDER_FAILED"]

MANIFESTS_RENDERED = "bke.v1.manifests.rendered"
RENDER_FAILED = "bke.v1.manifests.failed"


class ManifestsRendered(Message):
    request_id: str
    cluster: str
    digest: str
    nodes: int
    files: int
    tier: str
    template_sets: list[str]
    warnings: list[str] = []


class RenderFailed(Message):
    request_id: str
    cluster: str
    errors: list[str]
