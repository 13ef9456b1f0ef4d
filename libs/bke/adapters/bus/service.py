"""The one service shape: broker + lifespan + JetStream work subscribers, built by a factory.

Every service calls `make_service(...)` and registers its handlers with `work_subscriber`
(`bke.adapters.bus.handler.typed` turns a typed handler into one); FastStream runs the app's lifespan
and publishes, the lean consumer of fast_consumer consumes, and the details of acks, redelivery
and dead-lettering live in `delivery.settle`.

Each service has one `Readiness` (bke.adapters.bus.readiness): NATS connected (nats-py's disconnected /
reconnected callbacks), streams declared, Redis reachable (`watch_redis`, and the consumers
that find it away while handling a message); it is answered on `bke.v1.health.<service>`.
"""
from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass, field
import asyncio
from typing import Any, Awaitable, Callable

import nats.errors
from nats.aio.client import Client as NatsClient
from faststream import FastStream
from faststream.nats import NatsBroker

from bke.contracts.base import schema_headers
from bke.contracts.health import GetHealth, health_subject
from bke.adapters.settings import ServiceSettings
from .broker import ConnectionWatch, nats_broker
from .connect import connect_nats
from .readiness import Readiness
from .replies import answerable
from .stored_publish import publish_stored
from .streams import wait_declared

__all__ = ["REDIS_PROBE_S", "Service", "make_service"]

log = logging.getLogger("bke.adapters.bus.service")
SUBSCRIBED_FLUSH_S = 10  # seconds: nats-py's own default for a flush
REDIS_PROBE_S = 2.0  # how often a service pings its Redis (a not-ready flips back within this)


@dataclass
class Service:
    name: str
    settings: ServiceSettings
    broker: NatsBroker
    app: FastStream
    on_stop: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    after_start: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    before_stop: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    readiness: Readiness = field(default_factory=lambda: Readiness("service", ("nats", "streams")))
    # Checks run before every message of every subscriber (no I/O): one that raises (e.g. a
    # TemporaryError, bke.adapters.state.epoch.StateLost) settles the message as that error says.
    guards: list[Callable[[], None]] = field(default_factory=list)
    # Set when NATS ended the connection for good (see make_service's `closed`): the process
    # then stops and exits 1, so that its supervisor starts it again with its current creds.
    closed_for_good: bool = False
    stopping: bool = False
    # The HTTP side (bke.adapters.http): the service's own routes (its dashboard, read-only JSON), added
    # by its app before start; the metrics registry every consumer counts into; the port to
    # serve on (None: no HTTP; run_main sets the service's default when BKE_HTTP_PORT is unset).
    http_routes: list[Any] = field(default_factory=list)
    metrics: Any = None
    http_port: int | None = None
    http: Any = None

    def __post_init__(self) -> None:
        from bke.adapters.http.metrics import ServiceMetrics

        self.metrics = ServiceMetrics(self.name)
        self.metrics.is_ready = lambda: self.readiness.ready
        self.http_port = self.settings.http_port
    # Messages handled to the end by this process, per durable consumer (answered with its health)
    handled: dict[str, int] = field(default_factory=dict)
    # (stream, durable, filter) of every durable consumer wired: what its identity must be granted
    # (bke.adapters.auth.jetstream_grants.SERVICE_CONSUMERS, held to this by a test)
    consumers: list[tuple[str, str, str]] = field(default_factory=list)
    # (subject, queue group) of every core request it answers (bke.adapters.bus.responder)
    requests: list[tuple[str, str]] = field(default_factory=list)
    _js: tuple[Any, Any] | None = None  # (connection, its JetStream context): `publish`'s

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
        `bke.adapters.bus.handler.typed`). With `max_workers` > 1 messages are handled concurrently
        (handlers must be idempotent and order-independent, as every handler here is).
        `give_up(body, reason)` answers for a message that failed on every delivery (see
        delivery.settle). The consumer is the lean fetch loop of fast_consumer (why: there)."""
        from .fast_consumer import FastConsumer

        self.handled.setdefault(durable, 0)
        self.consumers.append((stream, durable, subject))

        async def guarded(body: bytes) -> None:
            for guard in self.guards:
                guard()
            await work(body)
            self.handled[durable] += 1  # only a handler that returned: this replica did the work

        # counted under the consumer's filter subject (bke.adapters.http.metrics: bounded labels)
        guarded = self.metrics.observe(subject, guarded)

        consumer = FastConsumer(subject, stream, durable, guarded, service=self.name, broker=self.broker,
                                max_deliver=self.settings.max_deliver, ack_wait=self.settings.ack_wait_seconds,
                                batch=batch_size, workers=max_workers, give_up=give_up, readiness=self.readiness,
                                max_ack_pending=self.settings.max_ack_pending)

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

    def watch_redis(self, redis: Any, close: bool = True) -> None:
        """Ping `redis` every REDIS_PROBE_S and keep the readiness condition "redis" up to date
        (so that a service with nothing to handle still reports an outage, and held messages
        are tried again as soon as Redis answers). Every service made by `make_service` has
        one, with a client of its own (closed at stop unless `close` is False)."""

        task: list[asyncio.Task] = []

        async def probe() -> None:
            while task:
                try:
                    await asyncio.wait_for(redis.ping(), timeout=REDIS_PROBE_S)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 - any failure to answer is "unreachable"
                    self.readiness.set("redis", False, f"redis unreachable: {type(exc).__name__}: {exc}"[:300])
                else:
                    self.readiness.set("redis", True)
                await asyncio.sleep(REDIS_PROBE_S)  # the probe's period

        async def _start() -> None:
            task.append(asyncio.create_task(probe(), name=f"{self.name}:redis-probe"))

        async def _stop() -> None:
            running, task[:] = list(task), []  # an empty list also ends the loop
            for t in running:
                t.cancel()
            if running:
                # bounded: redis-py can swallow a cancellation while it connects
                await asyncio.wait(running, timeout=2 * REDIS_PROBE_S)
            if close:
                await redis.aclose()

        self.readiness.set("redis", False, "redis not checked yet")
        self.after_start.insert(0, _start)
        self.before_stop.append(_stop)

    async def retry_while_store_away(self, work: Callable[[], Awaitable[Any]], stopping: Callable[[], bool],
                                     log: Any) -> None:
        """Run `work` once Redis answers: a service started before its store (or during an
        outage) waits, not ready, instead of crashing (the dispatcher's and the upgrader's
        resumption of running operations). Anything but an outage is a bug: raised."""
        from bke.core.errors import is_unavailable

        while not stopping():
            try:
                await work()
                return
            except Exception as exc:  # noqa: BLE001 - an outage waits; anything else is raised
                if not is_unavailable(exc):
                    raise
                log.warning("resuming waits for Redis: %s: %s", type(exc).__name__, exc, extra={"rate_key": "resume"})
                await self.readiness.wait_for("redis", timeout=REDIS_PROBE_S)
                if not self.readiness.ok("redis"):
                    await asyncio.sleep(REDIS_PROBE_S)  # the probe's period: it says when Redis is back

    async def _serve_health(self) -> None:
        async def answer(msg: Any) -> None:
            if not answerable(msg):
                return  # a publish without a reply inbox asks nothing
            if msg.data.strip():  # an empty body is the request too (`nats req ... ''`)
                try:
                    GetHealth.model_validate_json(msg.data)
                except ValueError:
                    pass  # the answer is the same whatever was asked; never fail a probe
            answer_doc = self.readiness.snapshot().model_copy(update={
                "instance": f"{socket.gethostname()}:{os.getpid()}", "handled": dict(self.handled)})
            await msg.respond(answer_doc.to_bytes())

        # every replica answers for itself (no queue group): a tool sees each one
        await self.nc.subscribe(health_subject(self.name), cb=answer)
        self.readiness.set("nats", self.nc.is_connected)

    async def start_http(self) -> None:
        """Serve /healthz, /readyz, /metrics and the service's routes, when a port is set."""
        if self.http_port is None or self.http is not None:
            return
        from bke.adapters.http.app import build_app
        from bke.adapters.http.server import HttpServer
        from bke.adapters.http.token_gate import TokenGate, read_token

        token = read_token(self.settings.http_token_file, self.settings.http_host)
        app: Any = build_app(self.name, self.metrics, self.readiness.snapshot, self.http_routes)
        if token is not None:
            app = TokenGate(app, token)
        server = HttpServer(app, self.settings.http_host, self.http_port, self.name)
        await server.start()
        self.http = server

    async def stop_http(self) -> None:
        if self.http is not None:
            await self.http.stop()
            self.http = None

    async def start(self) -> None:
        """Check the streams, then start consuming (what `app.run()` does, for tests)."""
        await self.start_http()
        await _check_streams_at(self.settings)
        self.readiness.set("streams", True)
        await self.broker.start()
        await self._serve_health()
        for fn in self.after_start:
            await fn()
        await self.subscribed()

    async def subscribed(self) -> None:
        """Wait until the server has every subscription made so far: a request sent from another
        connection right after start must find its responder (a started service is listening).
        A bus that drops right then is not a reason to stop: the client subscribes again when it
        reconnects, and readiness says the bus is away meanwhile."""
        try:
            await self.nc.flush(timeout=SUBSCRIBED_FLUSH_S)
        except (nats.errors.TimeoutError, nats.errors.ConnectionClosedError, nats.errors.ConnectionReconnectingError,
                asyncio.TimeoutError) as exc:
            log.warning("subscriptions not confirmed by the server at start: %s", type(exc).__name__)

    async def stop(self) -> None:
        self.stopping = True
        for fn in self.before_stop:
            await fn()
        await self.broker.stop()
        for fn in self.on_stop:
            await fn()
        await self.stop_http()

    async def notify(self, payload: bytes, subject: str, headers: dict[str, str] | None = None) -> None:
        """Fire-and-forget publish for high-volume progress events: the stream still stores
        them, but the caller does not wait for each PubAck (Redis holds the truth)."""
        await self.nc.publish(subject, payload, headers=schema_headers(headers))

    async def publish(self, payload: bytes, subject: str, headers: dict[str, str] | None = None) -> None:
        """Returns once the stream stored it (bke.adapters.bus.stored_publish: a core publish is
        dropped while the stream elects a leader). Every message says its body's form
        (bke.adapters.bus.message_version)."""
        await publish_stored(self._jetstream(), subject, payload, schema_headers(headers))

    def _jetstream(self) -> Any:
        """One JetStream context per connection: its PubAcks share one reply subscription
        (nats-py's publish_async), made on its first publish."""
        nc = self.nc
        if self._js is None or self._js[0] is not nc:
            self._js = (nc, nc.jetstream())
        return self._js[1]


def make_service(name: str, settings: ServiceSettings) -> Service:
    logging.getLogger().setLevel(settings.log_level)
    readiness = Readiness(name, ("nats", "streams"))
    connection = ConnectionWatch(readiness)
    broker = nats_broker(name, settings, connection)
    app = FastStream(broker, logger=logging.getLogger(f"bke.{name}.faststream"))
    svc = connection.svc = Service(name=name, settings=settings, broker=broker, app=app, readiness=readiness)
    svc.watch_redis(_probe_client(settings))
    _lifespan(svc)
    return svc


def _lifespan(svc: Service) -> None:
    """What FastStream runs around the broker (what `Service.start` and `stop` do in tests)."""
    app = svc.app

    @app.on_startup
    async def _streams() -> None:
        # HTTP first: /healthz answers (and /readyz says why not) while the bus is still away
        await svc.start_http()
        await _check_streams_at(svc.settings)
        svc.readiness.set("streams", True)

    @app.after_startup
    async def _after_start() -> None:
        await svc._serve_health()
        for fn in svc.after_start:
            await fn()
        await svc.subscribed()

    @app.on_shutdown
    async def _before_stop() -> None:
        svc.stopping = True
        for fn in svc.before_stop:
            await fn()

    @app.after_shutdown
    async def _close() -> None:
        for fn in svc.on_stop:
            await fn()
        await svc.stop_http()


def _probe_client(settings: ServiceSettings) -> Any:
    """A Redis client of the readiness probe's own, with short timeouts: a probe that hangs for
    the length of an outage would report nothing. Through Sentinel it asks for the primary
    (a Redis failover is an outage until the new primary answers)."""
    from redis.asyncio import Redis

    from bke.adapters.state.client import redis_client

    probe: dict[str, Any] = {"socket_timeout": REDIS_PROBE_S, "socket_connect_timeout": REDIS_PROBE_S}
    if settings.store.sentinels:
        return redis_client(settings.store, **probe)
    return Redis.from_url(settings.redis_url, **probe)


STREAMS_WAIT_S = 60.0  # the deploy step still declaring, or a NATS cluster's nodes forming


async def _check_streams_at(settings: ServiceSettings) -> None:
    # A short-lived connection of its own: the broker subscribes only once streams exist.
    nc = await connect_nats(settings.bus)
    try:
        await wait_declared(nc.jetstream(), settings.stream_replicas, STREAMS_WAIT_S)
    finally:
        await nc.close()


def run_main(name: str, create: Callable[[], Service]) -> int:
    """The body of every `bke-<service>` entry point: structured logs, settings checked
    before anything connects (a missing BKE_NATS_URL is a clear error and exit 2), run
    until SIGTERM."""
    import asyncio
    import sys

    from pydantic import ValidationError

    from bke.core.errors import PermanentError
    from bke.adapters.logs import setup_logging

    from bke.adapters.http.token_gate import read_token

    setup_logging(name)
    try:
        svc = create()
        # Checked here too, not only when the HTTP side starts: an exposed dashboard without a
        # token is a settings error (ERROR line, exit 2), not a traceback from inside the loop.
        read_token(svc.settings.http_token_file, svc.settings.http_host)
    except ValidationError as exc:
        for err in exc.errors(include_url=False):
            field = ".".join(str(p) for p in err["loc"]) or "settings"
            sys.stderr.write(f"ERROR bke-{name}: {field}: {err['msg']} (docs/guides/deploy.md: running each service alone)\n")
        return 2
    except PermanentError as exc:  # e.g. BKE_SECRET_KEY_FILE missing or unreadable
        sys.stderr.write(f"ERROR bke-{name}: {exc}\n")
        return 2
    if svc.http_port is None:
        from bke.adapters.http.ports import default_port

        svc.http_port = default_port(name)
    asyncio.run(svc.app.run())
    return 1 if svc.closed_for_good else 0
