"""Where a command finds NATS and Redis: `--workdir` (a lab), explicit URLs, or the env."""
from __future__ import annotations

import os
from pathlib import Path

from bke.runtime import EmbeddedRuntime

from .output import EXIT_INVALID, die

__all__ = ["resolve_urls"]


def resolve_urls(workdir: Path | None, nats_url: str | None, redis_url: str | None) -> tuple[str, str]:
    if workdir is not None:
        info = EmbeddedRuntime.read_info(workdir.resolve() / "runtime")
        if info is None:
            die(f"{workdir}: no running lab here (no runtime/runtime.json); start one with `bke lab install`", EXIT_INVALID)
        return info.nats_url, info.redis_url
    nats_url = nats_url or os.environ.get("BKE_NATS_URL")
    redis_url = redis_url or os.environ.get("BKE_REDIS_URL")
    if not nats_url or not redis_url:
        die("say where BKE runs: --workdir DIR (a lab), or --nats URL and --redis URL (or BKE_NATS_URL / BKE_REDIS_URL)", EXIT_INVALID)
    return nats_url, redis_url
