"""Clients of a real nats-server in operator mode under a given identity, recording the server's
permission errors so that a test can wait on a refusal (and show its positive control)."""
from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import nats
from nats.aio.client import Client as NatsClient

from bke.adapters.auth import agent_permissions, identity_name, inbox_prefix, role_permissions, write_creds
from bke.adapters.auth.authority import Authority
from bke.adapters.bus.connect import BusAccess, connect_options
from bke.adapters.runtime import EmbeddedRuntime

__all__ = ["CLUSTER", "Client", "_authority", "_connect", "_identity"]

CLUSTER = "c1"


def _authority(rt: EmbeddedRuntime) -> Authority:
    assert rt.nats_auth is not None
    return rt.nats_auth.authority


class Client:
    """A connection that records the server's permission errors, to wait on them."""

    def __init__(self, nc: NatsClient, errors: list[str]) -> None:
        self.nc, self.errors = nc, errors

    async def refused(self, subject: str, kind: str = "publish", timeout: float = 5.0) -> bool:
        deadline = time.monotonic() + timeout
        needle = f'permissions violation for {kind} to "{subject}"'.lower()
        while time.monotonic() < deadline:
            if any(needle in e.lower() for e in self.errors):
                return True
            await asyncio.sleep(0.02)  # polling under a deadline
        return False

    async def pub_refused(self, subject: str, payload: bytes = b"{}") -> bool:
        await self.nc.publish(subject, payload, reply=self.nc.new_inbox())
        await self.nc.flush()
        return await self.refused(subject)

    async def sub_refused(self, subject: str) -> bool:
        await self.nc.subscribe(subject)
        await self.nc.flush()
        return await self.refused(subject, "subscription")

    async def api(self, subject: str, payload: bytes = b"") -> dict:
        """A JetStream API call that must get an answer (allowed by the permissions)."""
        msg = await self.nc.request(subject, payload, timeout=5)
        return json.loads(msg.data)


async def _connect(rt: EmbeddedRuntime, creds: Path | None, prefix: str | None) -> Client:
    assert rt.info is not None
    errors: list[str] = []

    async def on_error(exc: Exception) -> None:
        errors.append(str(exc))

    opts = connect_options(BusAccess(rt.info.nats_url, creds, prefix,
                                     Path(rt.info.nats_tls_ca) if rt.info.nats_tls_ca else None))
    opts.update(error_cb=on_error, max_reconnect_attempts=0, allow_reconnect=False)
    return Client(await nats.connect(**opts), errors)


async def _identity(rt: EmbeddedRuntime, tmp: Path, role: str, node: str | None = None) -> Client:
    name = identity_name(role, CLUSTER if role == "agent" else None, node)
    perms = agent_permissions(CLUSTER, node) if node else role_permissions(role)
    user = _authority(rt).user(name, perms, iat=int(time.time()))
    creds = write_creds(tmp / f"{name}.creds", user.creds)
    return await _connect(rt, creds, inbox_prefix(name))
