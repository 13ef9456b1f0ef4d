"""Upgrader settings: the shared connection variables plus `BKE_UPGRADER_*`."""
from __future__ import annotations

import os
import socket
from typing import Literal

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from bke.adapters.settings import ServiceSettings

from .answer_deadline import DEFAULT_TIMEOUT_S

__all__ = ["UpgraderSettings"]


class UpgraderSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="BKE_UPGRADER_", extra="ignore", frozen=True)

    # Identifies this replica in the upgrade lease; unique per process.
    owner: str = Field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")
    lease_ms: int = 15000
    # lab: binary checksums are the lab's placeholders, drains and addons are recorded (no
    # apiserver); real: checksums from the httpRepo, drains and addons through the cluster's API.
    mode: Literal["lab", "real"] = "real"
    repo_source: Literal["auto", "http-repo"] = "auto"
    # Where the Kubernetes API work goes (addons, labels and taints, health, drains): "auto" =
    # recorded in lab mode, the cluster's apiserver in real mode; "real" = the apiserver in lab
    # mode too (a lab whose control plane is real: `bke lab install --control-plane real`).
    cluster_api: Literal["auto", "real"] = "auto"
    # An agent that has not sent a heartbeat for this long is not alive (the AgentsAlive check).
    heartbeat_stale_s: float = 90.0
    # A node that has not answered its command this long after the batch was sent fails the
    # step (a dead agent must not hold the upgrade forever): longer than any step's own timeout
    # (a snapshot of a large etcd may take 900 s; a runtime replacement 300 s, then a rollback).
    answer_deadline_s: float = 1800.0
    status_timeout_s: float = 10.0
    # A changed spec's join or removal (the dispatcher) or a certificate re-issue or renewal (the
    # certs service) not answered this long after it was first asked fails its step, naming the
    # service: a service that is down must not hold the run and the operation slot forever. The
    # dispatcher's own join waits up to BKE_DISPATCHER_JOIN_AGENTS_TIMEOUT_S (900 s) for agents
    # before it answers: keep this longer. 0: wait forever.
    service_answer_timeout_s: float = Field(DEFAULT_TIMEOUT_S, ge=0)
    # How long a replaced static pod has to answer healthy before its node is rolled back.
    component_timeout_s: float = 180.0
    # The agent release the `agents` step installs on every node (a bundle's httpRepo URL or
    # directory: bke_upgrader.agent_release); "": none, the step checks each agent's version.
    # Every agent must then run under bke-agent-launch, which rolls a new agent back that has
    # not come up within agent_confirm_timeout_s.
    agent_release: str = ""
    agent_confirm_timeout_s: float = 120.0
