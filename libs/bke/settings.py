"""Settings shared by every service. Each service subclasses with its own env prefix.

The connection settings are the same variables for every service (`BKE_NATS_URL`,
`BKE_REDIS_URL`); a service's own knobs use its prefix (`BKE_PLANNER_...`).
"""
from __future__ import annotations

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["ServiceSettings"]


class ServiceSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="BKE_", extra="ignore", frozen=True)

    # No defaults: a service must never fall back on whatever NATS/Redis runs on the
    # standard ports of the machine it happens to start on.
    nats_url: str = Field(validation_alias=AliasChoices("BKE_NATS_URL", "nats_url"))
    redis_url: str = Field(validation_alias=AliasChoices("BKE_REDIS_URL", "redis_url"))
    log_level: str = Field("INFO", validation_alias=AliasChoices("BKE_LOG_LEVEL", "log_level"))
    # How often one message may fail unexpectedly before it is dead-lettered.
    max_deliver: int = 5
    ack_wait_seconds: float = 60.0
