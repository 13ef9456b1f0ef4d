"""`bke-agent` settings: `BKE_AGENT_*` for the agent's own knobs, `BKE_NATS_URL` shared.

Why its own class rather than `bke.adapters.settings.ServiceSettings`: the agent never talks to Redis,
and `bke-agent init` (run by `bke agent bootstrap` to read the public key back) must work
without any NATS URL, so `nats_url` is optional here and checked only by `run`.

Backends:
    host  the real machine; `root` is "/" (tests point it at a temporary directory)
    lab   everything under `root` (the node's tree, `<workdir>/hosts/<hostname>`); the node's
          own address is `ip` (127.0.0.x in the lab)
"""
from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from bke.adapters.bus.connect import BusAccess

__all__ = ["AgentSettings", "HOST_STATE_DIR", "LAB_STATE_SUBDIR"]

HOST_STATE_DIR = Path("/var/lib/bke-agent")
LAB_STATE_SUBDIR = "var/lib/bke-agent"  # under the node root


class AgentSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="BKE_AGENT_", extra="ignore", frozen=True)

    cluster: str = Field(min_length=1)
    node: str = Field(min_length=1)  # the hostname, as in the spec
    backend: Literal["host", "lab"] = "host"
    root: Path = Path("/")
    # The agent's key, journal and executions log. Default: /var/lib/bke-agent on a host,
    # <root>/var/lib/bke-agent in the lab (so a lab node's whole state is under its tree).
    state_dir: Path | None = None
    ip: str = "127.0.0.1"  # the node's own address; the lab maps loopback listeners onto it
    nats_url: str | None = Field(None, validation_alias=AliasChoices("BKE_NATS_URL", "nats_url"))
    # the agent's own NATS identity (see bke.adapters.bus.connect); unset: a server without authentication
    nats_creds: Path | None = Field(None, validation_alias=AliasChoices("BKE_NATS_CREDS", "nats_creds"))
    nats_inbox_prefix: str | None = Field(None, validation_alias=AliasChoices("BKE_NATS_INBOX_PREFIX", "nats_inbox_prefix"))
    nats_tls_ca: Path | None = Field(None, validation_alias=AliasChoices("BKE_NATS_TLS_CA", "nats_tls_ca"))
    # the dispatcher's command-signing public key, given at provisioning (else <state>/command.pub)
    command_key: str | None = None
    heartbeat_s: float = Field(10.0, ge=0)  # 0 disables heartbeats
    # how often the agent checks whether its JWT is in the last third of its life and asks for a
    # new one for the same key (bke_agent.renewal); 0 turns the agent's own renewal off
    renew_check_s: float = Field(3600.0, ge=0)
    ack_wait_s: float = Field(30.0, gt=0)  # a running command is kept alive with in-progress acks
    # How long a result and its ack are sent again while NATS does not answer (a cluster's stream
    # or consumer electing a new leader after a node is lost takes a few seconds), before the
    # command is left to its redelivery (bke_agent.loop)
    result_retry_s: float = Field(10.0, ge=0)
    stop_grace_s: float = Field(20.0, ge=0)  # SIGTERM waits this long for the running command
    # results are kept until a day after their command expired (journal.py); this is the age at
    # which a result stored before results named their expiry goes (at least the validity + a day)
    journal_keep_days: float = Field(8.0, gt=0)
    kubelet_poll_s: float = Field(0.2, gt=0)  # lab: how often the kubelet stand-in reads manifests
    # lab: write placeholders for fetched binaries, or download them from the httpRepo for real
    # (a bundle served by `bke bundle serve`; the dispatcher then reads real checksums too)
    lab_fetch: Literal["placeholder", "download"] = "placeholder"

    @model_validator(mode="after")
    def _lab_needs_a_root(self) -> AgentSettings:
        if self.backend == "lab" and self.root.resolve() == Path("/"):
            raise ValueError("the lab backend needs BKE_AGENT_ROOT: the node's own directory, never /")
        return self

    @property
    def bus(self) -> BusAccess:
        """How this agent reaches NATS (`run` checks that nats_url is set first)."""
        return BusAccess(self.nats_url or "", self.nats_creds, self.nats_inbox_prefix, self.nats_tls_ca)

    @property
    def state_path(self) -> Path:
        """Where this agent keeps its state (see `state_dir`)."""
        if self.state_dir is not None:
            return self.state_dir
        return self.root / LAB_STATE_SUBDIR if self.backend == "lab" else HOST_STATE_DIR
