"""A service's FastStream broker over its NATS connection, and what that connection's callbacks
report: the readiness condition "nats" while nats-py reconnects, and the stop of a service whose
connection NATS closed for good (bke.adapters.bus.service builds both)."""
from __future__ import annotations

import logging
import os
import signal
from typing import TYPE_CHECKING

from faststream.nats import NatsBroker
from faststream.nats.security import NatsSecurity

from bke.adapters.settings import ServiceSettings

from .connect import connect_options
from .readiness import Readiness

if TYPE_CHECKING:
    from .service import Service

__all__ = ["ConnectionWatch", "nats_broker"]

log = logging.getLogger("bke.adapters.bus.service")


class ConnectionWatch:
    """nats-py's connection callbacks: the readiness condition "nats", and the stop of a service
    whose connection NATS closed for good."""

    def __init__(self, readiness: Readiness) -> None:
        self.readiness = readiness
        self.svc: Service | None = None  # set once made (the broker is made first, with these)

    async def disconnected(self) -> None:
        self.readiness.set("nats", False, "nats disconnected (reconnecting)")

    async def reconnected(self) -> None:
        self.readiness.set("nats", True)

    async def closed(self) -> None:
        # nats-py reconnects after an outage but closes for good on a server `-ERR` other than a
        # permissions one (nats/aio/client.py `_process_err`): what a revoked or rotated identity
        # gets ("User Authentication Revoked"). Alive but cut off, a service would be silent for
        # ever; it stops instead and exits 1 (run_main), as the agent does.
        if self.svc is None or self.svc.stopping:
            return
        self.svc.closed_for_good = True
        self.readiness.set("nats", False, "NATS closed the connection for good (identity revoked or rotated?)")
        log.error("NATS closed this service's connection for good (its identity revoked or rotated?); stopping")
        os.kill(os.getpid(), signal.SIGTERM)  # FastStream's graceful stop, as `kill` would


def nats_broker(name: str, settings: ServiceSettings, connection: ConnectionWatch) -> NatsBroker:
    # FastStream's own lines go through loggers of ours, so that they reach the root handler and
    # come out as JSON like every other line (its default loggers write coloured text to stdout).
    # Its per-message lines go to DEBUG: our handlers log what matters.
    opts = connect_options(settings.bus, name=f"bke-{name}")
    # FastStream takes TLS as a security object, not nats-py's `tls` keyword.
    tls = opts.pop("tls", None)
    return NatsBroker(opts.pop("servers"), **opts, security=NatsSecurity(ssl_context=tls) if tls else None,
                      logger=logging.getLogger(f"bke.{name}.faststream.broker"),
                      log_level=logging.DEBUG, graceful_timeout=10.0, disconnected_cb=connection.disconnected,
                      reconnected_cb=connection.reconnected, closed_cb=connection.closed)
