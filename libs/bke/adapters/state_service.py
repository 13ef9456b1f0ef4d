"""The opening of a service that keeps records in Redis (certs, planner, renderer): the service,
its Redis client closed at stop, its records of a deleted cluster removed on
`bke.v1.cluster.deleted` (bke.adapters.forgetting), and every message held while the state is
lost or not initialised (bke.adapters.state.epoch): it waits for a restore, never starts over.

The dispatcher opens with options of its own (an epoch watch with hooks, a cache dropped on
delete) and the upgrader without an epoch watch, so they call the pieces themselves.
"""
from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone

from redis.asyncio import Redis

from bke.adapters.bus.service import Service, make_service
from bke.adapters.forgetting import serve_deleted
from bke.adapters.settings import ServiceSettings
from bke.adapters.state.client import redis_client
from bke.adapters.state.epoch import watch_epoch

__all__ = ["make_state_service"]


def _utc_now() -> datetime:
    return datetime.now(timezone.utc)


def make_state_service(name: str, settings: ServiceSettings,
                       now: Callable[[], datetime] = _utc_now) -> tuple[Service, Redis]:
    """The service `name` and its Redis client, wired as the module docstring says."""
    svc = make_service(name, settings)
    redis = redis_client(settings.store)
    serve_deleted(svc, redis, now)
    svc.on_stop.append(redis.aclose)
    watch_epoch(svc, redis)
    return svc, redis
