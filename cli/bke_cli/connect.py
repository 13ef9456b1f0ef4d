"""Where a command finds the services: `--workdir` (a lab), an explicit URL, or the env.

A lab's CLI identity is the lab's `operator` creds file (0600, made by `bke lab install`).
The commands that talk to a running deployment (status, retry, apply) need NATS only: they
ask the services over the bus and never read Redis.
"""
from __future__ import annotations

import os
from pathlib import Path

from bke.adapters.auth.permissions import inbox_prefix
from bke.adapters.bus.connect import BusAccess
from bke.lab.identities import creds_path
from bke.adapters.runtime import EmbeddedRuntime

from .output import EXIT_INVALID, die

__all__ = ["resolve_nats"]


def resolve_nats(workdir: Path | None, nats_url: str | None) -> BusAccess:
    if workdir is not None:
        info = EmbeddedRuntime.read_info(workdir.resolve() / "runtime")
        if info is None:
            die(f"{workdir}: no running lab here (no runtime/runtime.json); start one with `bke lab install`", EXIT_INVALID)
        tls = Path(info.nats_tls_ca) if info.nats_tls_ca else None
        creds = creds_path(workdir.resolve(), "operator")  # the lab's operator identity (bke.lab.identities)
        if not creds.exists():  # a lab whose NATS runs without authentication (bench)
            return BusAccess(info.nats_url, tls_ca=tls)
        return BusAccess(info.nats_url, creds, inbox_prefix("operator"), tls)
    nats_url = nats_url or os.environ.get("BKE_NATS_URL")
    if not nats_url:
        die("say where BKE runs: --workdir DIR (a lab), or --nats URL (or BKE_NATS_URL)", EXIT_INVALID)
    return BusAccess(nats_url, _path_env("BKE_NATS_CREDS"), os.environ.get("BKE_NATS_INBOX_PREFIX") or None,
                     _path_env("BKE_NATS_TLS_CA"))


def _path_env(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value) if value else None
