"""Dispatcher settings: the shared connection variables plus `BKE_DISPATCHER_*`."""
from __future__ import annotations

import os
import socket
from typing import Literal

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from bke.adapters.settings import ServiceSettings

__all__ = ["DispatcherSettings"]


class DispatcherSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="BKE_DISPATCHER_", extra="ignore", frozen=True)

    # Identifies this replica in its operations' leases; unique per process.
    owner: str = Field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")
    lease_ms: int = 15000
    health_interval_s: float = 60.0
    command_key_announce_s: float = 30.0  # a command-key rollover's rounds (command_key.py)
    # lab: binaries are simulated and addons validated + recorded (no apiserver);
    # real: checksums from the httpRepo's `.sha256` files, addons applied with server-side apply.
    mode: Literal["lab", "real"] = "real"
    # What the dispatcher reads from the httpRepo (binary checksums `<url>.sha256`, the CNI's
    # manifest): "auto" = simulated in lab mode (placeholders), the spec's httpRepo in real mode;
    # "http-repo" = the spec's httpRepo in lab mode too (a lab whose agents download from a real
    # httpRepo, e.g. a bundle: `bke lab install --http-repo URL`).
    repo_source: Literal["auto", "http-repo"] = "auto"
    # Where the Kubernetes API work goes (addons, labels and taints, health, drains): "auto" =
    # recorded in lab mode, the cluster's apiserver in real mode; "real" = the apiserver in lab
    # mode too (a lab whose control plane is real: `bke lab install --control-plane real`).
    cluster_api: Literal["auto", "real"] = "auto"
    batch_size: int = 64
    # How long a join waits for its new nodes' agents to register (their bundles sealed) before
    # it fails naming them (bke_dispatcher.ops.join.decide.next_step).
    join_agents_timeout_s: float = Field(900.0, gt=0)
    # How often the state's epoch is read (bke.adapters.state.epoch): the longest a lost state goes unseen.
    epoch_check_s: float = 1.0
