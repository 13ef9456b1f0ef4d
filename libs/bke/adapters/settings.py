"""Settings shared by every service. Each service subclasses with its own env prefix.

The connection settings are the same variables for every service (`BKE_NATS_URL`,
`BKE_REDIS_URL`); a service's own knobs use its prefix (`BKE_PLANNER_...`).

Beyond one machine: `BKE_NATS_URL` may list a NATS cluster's nodes, comma-separated
(bke.adapters.bus.connect.nats_servers); `BKE_REDIS_SENTINELS` (`host:port,host:port,...`) with
`BKE_REDIS_SENTINEL_MASTER` finds the Redis primary through Sentinel, and follows it after a
failover (bke.adapters.state.client); `BKE_STREAM_REPLICAS` sets the JetStream streams' replicas
(bke.adapters.bus.streams).
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import AliasChoices, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

if TYPE_CHECKING:
    from bke.adapters.bus.connect import BusAccess
    from bke.adapters.state.client import StoreAccess

__all__ = ["ServiceSettings"]


class ServiceSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="BKE_", extra="ignore", frozen=True)

    # No defaults: a service must never fall back on whatever NATS/Redis runs on the
    # standard ports of the machine it happens to start on.
    nats_url: str = Field(validation_alias=AliasChoices("BKE_NATS_URL", "nats_url"))
    # `redis://user:password@...` (this service's ACL user) or `rediss://` for TLS; never in a
    # repr, since the password is in it (bke.adapters.state.client.redact_url)
    redis_url: str = Field(validation_alias=AliasChoices("BKE_REDIS_URL", "redis_url"), repr=False)
    redis_tls_ca: Path | None = Field(None, validation_alias=AliasChoices("BKE_REDIS_TLS_CA", "redis_tls_ca"))
    # This service's NATS identity (see bke.adapters.bus.connect): a credentials file, its own inbox
    # prefix, and the CA for a tls:// server. Unset: a server without authentication (tests).
    nats_creds: Path | None = Field(None, validation_alias=AliasChoices("BKE_NATS_CREDS", "nats_creds"))
    nats_inbox_prefix: str | None = Field(None, validation_alias=AliasChoices("BKE_NATS_INBOX_PREFIX", "nats_inbox_prefix"))
    nats_tls_ca: Path | None = Field(None, validation_alias=AliasChoices("BKE_NATS_TLS_CA", "nats_tls_ca"))
    # Redis through Sentinel: the sentinels' `host:port` list and the name they monitor the
    # primary by. BKE_REDIS_URL still carries this service's user, password and db; its host and
    # port are not used then (the sentinels name the primary, and a new one after a failover).
    redis_sentinels: str | None = Field(None, validation_alias=AliasChoices("BKE_REDIS_SENTINELS", "redis_sentinels"))
    redis_sentinel_master: str | None = Field(
        None, validation_alias=AliasChoices("BKE_REDIS_SENTINEL_MASTER", "redis_sentinel_master"))
    # Replicas of each JetStream stream and object bucket (a NATS cluster: 3). Unset: a stream is
    # created with one and an existing stream keeps its count, so that a process started without
    # this setting never scales down what another converged.
    stream_replicas: int | None = Field(None, ge=1, le=5,
                                        validation_alias=AliasChoices("BKE_STREAM_REPLICAS", "stream_replicas"))
    log_level: str = Field("INFO", validation_alias=AliasChoices("BKE_LOG_LEVEL", "log_level"))
    # The service's HTTP side (bke.adapters.http: /healthz, /readyz, /metrics, its dashboard). Unset port:
    # the service's default (bke.adapters.http.ports) when it runs as its own process, no HTTP when built
    # in-process (tests); 0: any free port. Loopback by default: a container sets 0.0.0.0.
    http_host: str = Field("127.0.0.1", validation_alias=AliasChoices("BKE_HTTP_HOST", "http_host"))
    http_port: int | None = Field(None, ge=0, le=65535, validation_alias=AliasChoices("BKE_HTTP_PORT", "http_port"))
    # A bearer token every request but the probes must carry; required when http_host is not a
    # loopback address (bke.adapters.http.token_gate).
    http_token_file: Path | None = Field(None, validation_alias=AliasChoices("BKE_HTTP_TOKEN_FILE", "http_token_file"))
    # How often one message may fail unexpectedly before it is dead-lettered.
    max_deliver: int = 5
    # How long the server waits for an ack before it gives the message to another replica (or
    # to this service after a restart). Short, so that work held by a killed service is taken
    # up again within seconds; a handler that runs longer sends in-progress acks every third of
    # it (bke.adapters.bus.fast_consumer).
    ack_wait_seconds: float = 10.0
    # How many messages one consumer may have delivered and not yet acknowledged, those waiting
    # for a delayed redelivery included. NATS' default of 1,000 was filled by 1,000 forged
    # results that wait to be known (NotYetKnown, bounded) and stalled every other install.
    max_ack_pending: int = 20_000

    @field_validator("nats_url")
    @classmethod
    def _nats_list(cls, value: str) -> str:
        from bke.adapters.bus.connect import nats_servers

        nats_servers(value)  # a clear error for an empty or malformed entry of the list
        return value

    @field_validator("redis_sentinels")
    @classmethod
    def _sentinel_list(cls, value: str | None) -> str | None:
        from bke.adapters.state.client import parse_sentinels

        if value is not None:
            parse_sentinels(value)
        return value

    @model_validator(mode="after")
    def _sentinel_pair(self) -> "ServiceSettings":
        if (self.redis_sentinels is None) != (self.redis_sentinel_master is None):
            raise ValueError("BKE_REDIS_SENTINELS and BKE_REDIS_SENTINEL_MASTER go together: set both or neither")
        return self

    @property
    def store(self) -> "StoreAccess":
        """How this service reaches Redis."""
        from bke.adapters.state.client import StoreAccess, parse_sentinels

        sentinels = parse_sentinels(self.redis_sentinels) if self.redis_sentinels else ()
        return StoreAccess(self.redis_url, self.redis_tls_ca, sentinels, self.redis_sentinel_master)

    @property
    def bus(self) -> "BusAccess":
        """How this service reaches NATS."""
        from bke.adapters.bus.connect import BusAccess

        return BusAccess(self.nats_url, self.nats_creds, self.nats_inbox_prefix, self.nats_tls_ca)
