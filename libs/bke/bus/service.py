"""The one service shape: broker + lifespan + JetStream work subscribers, built by a factory.

Every service calls `make_service(...)` and registers its handlers with `work_subscriber`
(`bke.bus.handler.typed` turns a typed handler into one); FastStream runs the app's lifespan
and publishes, the lean consumer of fast_consumer consumes, and the details of acks, redelivery
and dead-lettering live in `delivery.settle`.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Awaitable, Callable

from nats.aio.client import Client as NatsClient
from faststream import FastStream
from faststream.nats import NatsBroker

from ..settings import ServiceSettings
from .connect import connect_nats, connect_options
from .streams import ensure_streams

__all__ = ["Service", "make_service"]


@dataclass
class Service:
    name: str
    settings: ServiceSettings
    broker: NatsBroker
    app: FastStream
    on_stop: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    after_start: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    before_stop: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    # Checks run before every message of every subscriber (no I/O): one that raises (e.g. a
    # TemporaryError, bke.state.epoch.StateLost) settles the message as that error says.
    guards: list[Callable[[], None]] = field(default_factory=list)

    def work_subscriber(
        self,
        subject: str,
        stream: str,
        durable: str,
        work: Callable[[bytes], Awaitable[None]],
        *,
        batch_size: int = 16,
        max_workers: int = 1,
        give_up: Callable[[bytes, str], Awaitable[None]] | None = None,
    ) -> None:
        """A durable pull consumer with explicit acks; `work` gets the raw body (see
        `bke.bus.handler.typed`). With `max_workers` > 1 messages are handled concurrently
        (handlers must be idempotent and order-independent, as every handler here is).
        `give_up(body, reason)` answers for a message that failed on every delivery (see
        delivery.settle). The consumer is the lean fetch loop of fast_consumer (why: there)."""
        from .fast_consumer import FastConsumer

        async def guarded(body: bytes) -> None:
            for guard in self.guards:
                guard()
            await work(body)

        consumer = FastConsumer(subject, stream, durable, guarded, service=self.name, broker=self.broker,
                                max_deliver=self.settings.max_deliver, ack_wait=self.settings.ack_wait_seconds,
                                batch=batch_size, workers=max_workers, give_up=give_up)

        async def _start() -> None:
            await consumer.start(self.nc)

        self.after_start.append(_start)
        self.before_stop.append(consumer.stop)

    @property
    def nc(self) -> NatsClient:
        """The broker's nats-py connection (for object store and core subscriptions)."""
        return self.broker.connection

    def fast_subscriber(self, subject: str, stream: str, durable: str, work: Callable[[bytes], Awaitable[None]],
                        *, batch_size: int = 256, workers: int = 32,
                        give_up: Callable[[bytes, str], Awaitable[None]] | None = None) -> None:
        """`work_subscriber` sized for hot paths: big batches, many concurrent handlers."""
        self.work_subscriber(subject, stream, durable, work, batch_size=batch_size, max_workers=workers, give_up=give_up)

    async def start(self) -> None:
        """Declare the streams, then start consuming (what `app.run()` does, for tests)."""
        await _ensure_streams_at(self.settings)
        await self.broker.start()
        for fn in self.after_start:
            await fn()

    async def stop(self) -> None:
        for fn in self.before_stop:
            await fn()
        await self.broker.stop()
        for fn in self.on_stop:
            await fn()

    async def notify(self, payload: bytes, subject: str, headers: dict[str, str] | None = None) -> None:
        """Fire-and-forget publish for high-volume progress events: the stream still stores
        them, but the caller does not wait for each PubAck (Redis holds the truth)."""
        await self.nc.publish(subject, payload, headers=headers or None)

    async def publish(self, payload: bytes, subject: str, headers: dict[str, str] | None = None) -> None:
        await self.broker.publish(payload, subject, headers=headers or None, stream=None)


def make_service(name: str, settings: ServiceSettings) -> Service:
    logging.getLogger().setLevel(settings.log_level)
    # FastStream's own lines go through loggers of ours, so that they reach the root handler and
    # come out as JSON like every other line (its default loggers write coloured text to stdout).
    # Its per-message lines go to DEBUG: our handlers log what matters.
    opts = connect_options(settings.bus, name=f"bke-{name}")
    broker = NatsBroker(opts.pop("servers"), **opts, logger=logging.getLogger(f"bke.{name}.faststream.broker"),
                        log_level=logging.DEBUG, graceful_timeout=10.0)
    app = FastStream(broker, logger=logging.getLogger(f"bke.{name}.faststream"))
    svc = Service(name=name, settings=settings, broker=broker, app=app)

    @app.on_startup
    async def _streams() -> None:
        await _ensure_streams_at(settings)

    @app.after_startup
    async def _after_start() -> None:
        for fn in svc.after_start:
            await fn()

    @app.on_shutdown
    async def _before_stop() -> None:
        for fn in svc.before_stop:
            await fn()

    @app.after_shutdown
    async def _close() -> None:
        for fn in svc.on_stop:
            await fn()

    return svc


async def _ensure_streams_at(settings: ServiceSettings) -> None:
    # A short-lived connection of its own: the broker subscribes only once streams exist.
    nc = await connect_nats(settings.bus)
    try:
        await ensure_streams(nc.jetstream())
    finally:
        await nc.close()


def run_main(name: str, create: Callable[[], Service]) -> int:
    """The body of every `bke-<service>` entry point: structured logs, settings checked
    before anything connects (a missing BKE_NATS_URL is a clear error and exit 2), run
    until SIGTERM."""
    import asyncio
    import sys

    from pydantic import ValidationError

    from ..errors import PermanentError
    from ..logs import setup_logging

    setup_logging(name)
    try:
        svc = create()
    except ValidationError as exc:
        for err in exc.errors(include_url=False):
            field = ".".join(str(p) for p in err["loc"]) or "settings"
            sys.stderr.write(f"ERROR bke-{name}: {field}: {err['msg']} (see the README, 'Running each service alone')\n")
        return 2
    except PermanentError as exc:  # e.g. BKE_SECRET_KEY_FILE missing or unreadable
        sys.stderr.write(f"ERROR bke-{name}: {exc}\n")
        return 2
    asyncio.run(svc.app.run())
    return 0
