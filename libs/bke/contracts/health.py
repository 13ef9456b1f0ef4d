"""Is a service ready? Asked of each service over core NATS (`bke.v1.health.<service>`), by
operators and tools; each service's HTTP /readyz (bke.adapters.http) serves the same `Readiness` object."""
from __future__ import annotations

from typing import Final, Literal

from .base import Message
from .channel import Channel

__all__ = ["CHANNELS", "HEALTH_PREFIX", "SERVICE_HEALTH_VERSION", "GetHealth", "ServiceHealth", "health_subject"]

HEALTH_PREFIX = "bke.v1.health"
SERVICE_HEALTH_VERSION: Final = "bke.v1/ServiceHealth"


def health_subject(service: str) -> str:
    return f"{HEALTH_PREFIX}.{service}"


class GetHealth(Message):
    """The request: nothing to say (an empty body is read as this too)."""


class ServiceHealth(Message):
    version: Literal["bke.v1/ServiceHealth"] = SERVICE_HEALTH_VERSION
    service: str
    ready: bool
    conditions: dict[str, bool]  # e.g. {"nats": true, "redis": false, "streams": true}
    reasons: list[str] = []  # why not ready, one per failing condition ("redis unreachable: ...")
    # Which process answered ("<host>:<pid>"): replicas of a service each answer for themselves.
    instance: str = ""
    # Messages this process handled to the end, per durable consumer, since it started: with
    # replicas sharing a consumer, each one's share of the work.
    handled: dict[str, int] = {}


CHANNELS: tuple[Channel, ...] = (
    Channel(HEALTH_PREFIX + ".{service}", GetHealth, "request", "Whether a service is ready (NATS connected, Redis reachable, streams declared) and why not (core NATS, not stored).", (), ("planner", "certs", "renderer", "dispatcher", "upgrader"), (ServiceHealth,),
            external="asked by operators and tools (`nats req bke.v1.health.dispatcher ''`); each service's HTTP /readyz serves the same object"),
)
