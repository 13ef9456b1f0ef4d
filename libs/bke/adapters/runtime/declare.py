"""The deploy step of a runtime this project starts itself (the lab's, the tests'): declare the
streams and buckets once NATS answers, before any service or agent starts.

What `bke streams ensure` does on a deployment. A service never declares (bke.adapters.bus.streams); with
authentication the runtime mints, from its own authority, a `streams` identity that may declare
and nothing else (bke.adapters.auth.jetstream_grants) and that expires within minutes, so nothing is left
to revoke.
"""
from __future__ import annotations

import asyncio
import tempfile
import threading
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from bke.adapters.auth.authority import Authority, write_creds
from bke.adapters.auth.permissions import identity_name, inbox_prefix, role_permissions
from bke.adapters.bus.connect import BusAccess
from bke.adapters.bus.declare import declare

__all__ = ["DEPLOY_IDENTITY_TTL_S", "declare_streams", "run_blocking"]

T = TypeVar("T")
DEPLOY_IDENTITY_TTL_S = 300


def run_blocking(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from synchronous code, inside a running loop or not."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    t = threading.Thread(target=target, name="bke-blocking")
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def declare_streams(nats_url: str, authority: Authority | None, tls_ca: str | None = None,
                    replicas: int | None = None) -> None:
    """Create or put back every declared stream and bucket; RuntimeError if they are not as
    declared afterwards (a sealed stream, say)."""

    with tempfile.TemporaryDirectory(prefix="bke-deploy-") as tmp:
        access = BusAccess(nats_url, tls_ca=Path(tls_ca) if tls_ca else None)
        if authority is not None:
            now = int(time.time())
            name = identity_name("streams")
            user = authority.user(name, role_permissions("streams"), iat=now, expires=now + DEPLOY_IDENTITY_TTL_S)
            access = BusAccess(nats_url, write_creds(Path(tmp) / "streams.creds", user.creds), inbox_prefix(name),
                               access.tls_ca)
        problems = run_blocking(declare(access, replicas, clusters=1))
    if problems:
        raise RuntimeError("streams not as declared after declaring them: " + "; ".join(problems))
