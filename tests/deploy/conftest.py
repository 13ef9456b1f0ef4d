"""The container path's fixtures (tests/containers.py), for tests/deploy only."""
from __future__ import annotations

from ..containers import container_nats_url, container_redis_url  # noqa: F401 - pytest fixtures

__all__ = ["container_nats_url", "container_redis_url"]
