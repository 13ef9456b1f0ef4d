"""How every BKE process reaches NATS: one place for the address, the identity and the reconnect rule.

Why one place: nats-py gives up after 60 reconnect attempts by default (`max_reconnect_attempts`),
and a process that gave up stays alive and silent, so nothing restarts it. Every connection made
here reconnects forever; a service reports itself not ready while it is cut off instead.

`BusAccess` is what a process needs to connect: the URL (or a comma-separated list of the URLs
of a NATS cluster's nodes: nats-py tries them in turn and moves to another node when one goes
away, see `nats_servers`), its credentials file (a NATS `.creds`
file: the identity's JWT and its nkey seed), its own inbox prefix (so that no identity can read
another's pulled messages through `_INBOX.>`) and, for TLS, the CA that signed the server's
certificate. A URL alone still works against a server without authentication (tests of single
handlers); the lab and every deployment file run NATS with authentication.
"""
from __future__ import annotations

import logging
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client as NatsClient

__all__ = ["BusAccess", "connect_nats", "connect_options", "log_bus_error", "nats_servers"]

log = logging.getLogger("bke.adapters.bus")

RECONNECT_WAIT_S = 1.0
CONNECT_TIMEOUT_S = 5.0


_SCHEMES = ("nats://", "tls://", "ws://", "wss://")


def nats_servers(url: str) -> list[str]:
    """`BKE_NATS_URL` as nats-py's server list: one URL, or several separated by commas (the nodes
    of one NATS cluster). Raises ValueError naming the variable for an empty entry or one that is
    no NATS URL (the URL itself is not echoed: it may carry a user and password)."""
    servers = [part.strip() for part in url.split(",")]
    for i, server in enumerate(servers):
        if not server:
            raise ValueError(f"BKE_NATS_URL: entry {i + 1} of {len(servers)} is empty (URLs are separated by single commas)")
        if "://" in server and not server.startswith(_SCHEMES):
            raise ValueError(f"BKE_NATS_URL: entry {i + 1} of {len(servers)} has an unknown scheme "
                             f"(nats://, tls://, ws:// or wss://)")
    return servers


@dataclass(frozen=True)
class BusAccess:
    url: str
    creds: Path | None = None  # NATS credentials file (JWT + seed); None: no authentication
    inbox_prefix: str | None = None  # this identity's own inbox prefix (its permissions allow only it)
    tls_ca: Path | None = None  # CA bundle to verify a `tls://` server with

    def __repr__(self) -> str:  # the creds path is not secret, but keep the repr short
        return f"BusAccess({self.url!r})"


def _tls_context(access: BusAccess) -> ssl.SSLContext | None:
    if access.tls_ca is None and not any(s.startswith("tls://") for s in nats_servers(access.url)):
        return None
    ctx = ssl.create_default_context(purpose=ssl.Purpose.SERVER_AUTH,
                                     cafile=str(access.tls_ca) if access.tls_ca else None)
    return ctx


async def log_bus_error(exc: Exception) -> None:
    """nats-py's default error callback prints a traceback per failed attempt, once a second for
    the whole of an outage; one line says the same."""
    log.warning("NATS: %s: %s", type(exc).__name__, exc)


def connect_options(access: BusAccess, *, name: str | None = None) -> dict[str, Any]:
    """Keyword arguments for `nats.connect` and FastStream's `NatsBroker` alike.

    With `max_reconnect_attempts=-1` even the first connect waits for the server forever, which
    is what a service wants (it starts before NATS, or NATS restarts under it)."""
    opts: dict[str, Any] = {
        "servers": nats_servers(access.url),
        "max_reconnect_attempts": -1,  # forever: see the module docstring
        "reconnect_time_wait": RECONNECT_WAIT_S,
        "connect_timeout": CONNECT_TIMEOUT_S,
        "error_cb": log_bus_error,
    }
    if name:
        opts["name"] = name
    if access.creds is not None:
        opts["user_credentials"] = str(access.creds)
    if access.inbox_prefix:
        opts["inbox_prefix"] = access.inbox_prefix
    tls = _tls_context(access)
    if tls is not None:
        opts["tls"] = tls
    return opts


async def connect_nats(access: BusAccess | str, *, name: str | None = None, wait: bool = False,
                       **extra: Any) -> NatsClient:
    """Connect, then reconnect forever after any outage.

    `wait=False` (a CLI): the first connect fails after two attempts if NATS is not there, so the
    user gets an error rather than a hang. `wait=True` (a daemon): wait for NATS from the start.
    """
    if isinstance(access, str):
        access = BusAccess(access)
    opts = connect_options(access, name=name)
    if not wait:
        # nats-py drops a server from its pool for good once it failed this many times, and a
        # limit of -1 retries the first connect forever: bound the first connect only, then lift
        # the limit (the client reads it at each reconnect; a success reset the server's count).
        opts["max_reconnect_attempts"] = 1
    opts.update(extra)
    nc = await nats.connect(**opts)
    nc.options["max_reconnect_attempts"] = -1
    return nc
