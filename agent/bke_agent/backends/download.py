"""`FetchFile` done for real: download over http(s), keep the file only if its sha256 matches.

Shared by the host backend and the lab backend when the lab fetches from a real httpRepo
(`BKE_AGENT_LAB_FETCH=download`, a bundle served by `bke bundle serve`): one implementation, so
the lab exercises the same download, verification and atomic replace as a node.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import httpx

from bke.contracts.agent_steps import FetchFile
from bke.contracts.statuses import StepResultStatus

from ..errors import StepError
from ..fsutil import fsync_dir
from .base import StepOutcome
from .files import file_matches

__all__ = ["fetch_verified"]


async def fetch_verified(local: Path, step: FetchFile, transport: httpx.AsyncBaseTransport | None = None) -> StepOutcome:
    """Skipped when `local` already holds the bytes; else a temp file beside it, hashed while
    written, fsynced and renamed into place only when the digest matches."""
    if file_matches(local, step.sha256, step.mode):
        return StepOutcome(StepResultStatus.SKIPPED, stdout=f"{step.path} already has sha256 {step.sha256}\n")
    local.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    tmp = local.with_name(f".{local.name}.bke-fetch.tmp")
    h = hashlib.sha256()
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            async with httpx.AsyncClient(transport=transport, trust_env=False,
                                         follow_redirects=True, timeout=30.0) as client:
                async with client.stream("GET", step.url) as resp:
                    if resp.status_code != 200:
                        raise StepError(f"GET {step.url}: HTTP {resp.status_code}")
                    async for chunk in resp.aiter_bytes():
                        h.update(chunk)
                        f.write(chunk)
            if h.hexdigest() != step.sha256.lower():
                raise StepError(f"{step.url}: sha256 {h.hexdigest()} does not match the expected {step.sha256}")
            os.fchmod(f.fileno(), step.mode)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, local)
    except httpx.HTTPError as exc:
        raise StepError(f"GET {step.url}: {type(exc).__name__}: {exc}") from None
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(local.parent)
    return StepOutcome(stdout=f"fetched {step.url} -> {step.path} (sha256 ok)\n")
