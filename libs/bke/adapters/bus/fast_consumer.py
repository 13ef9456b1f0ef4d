"""The lean durable pull consumer every service subscribes with.

FastStream's per-message pipeline (dependency injection, middlewares, a thread hop for
sync dependencies) costs about 0.7 ms a message; on the dispatcher's result stream at 5,000
nodes that alone was a fifth of the install. And FastStream 0.7.8's pull subscriber suppresses
only nats-py's own TimeoutError: the asyncio.TimeoutError that nats-py 2.16's fetch also raises
ends its task, and a message delivered while the supervisor restarts it waited out the full ack
wait (seen as a 60 s stall of a dispatcher test). This loop fetches batches with nats-py, treats
either timeout as "nothing yet", and settles each message with the `delivery.settle` rules.

Work held by a killed service is taken up again within seconds: the consumer's `ack_wait` is
short (ServiceSettings.ack_wait_seconds, 10 s), and while a handler runs longer, or holds its
message through an outage of the store (delivery.settle), the message gets an in-progress ack
every ack_wait/3, which restarts the server's ack timer without counting a delivery (the
agent's loop does the same for long commands).
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Awaitable, Callable

import nats
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from bke.core.errors import is_unavailable
from .delivery import settle
from .readiness import Readiness

__all__ = ["FastConsumer"]

log = logging.getLogger(__name__)


class _Delivery:
    """The two things `settle` needs from a message, over a nats-py Msg."""

    def __init__(self, msg: Any):
        self.raw_message = msg
        self.body = msg.data

    async def ack(self) -> None:
        await self.raw_message.ack()

    async def nack(self, delay: float | None = None) -> None:
        await self.raw_message.nak(delay=delay)


class _KeepAlive:
    """In-progress acks while the message is handled, so the server neither redelivers it nor
    waits out the ack wait; failures are ignored (NATS away: the next one may pass). A timer,
    not a task per message: almost every message is settled long before the first period, and
    a task created and cancelled for each cost more than the upgrader's own handling of a
    result (py-spy, 5,000-node upgrade)."""

    def __init__(self, msg: Any, period: float):
        self.msg, self.period = msg, period
        self.loop = asyncio.get_running_loop()
        self.acks: set[asyncio.Task[None]] = set()
        self.timer = self.loop.call_later(period, self._tick)

    def _tick(self) -> None:
        task = self.loop.create_task(self._ack())
        self.acks.add(task)
        task.add_done_callback(self.acks.discard)
        self.timer = self.loop.call_later(self.period, self._tick)

    async def _ack(self) -> None:
        with contextlib.suppress(Exception):
            await self.msg.in_progress()

    def cancel(self) -> None:
        self.timer.cancel()
        for task in list(self.acks):
            task.cancel()


class FastConsumer:
    def __init__(self, subject: str, stream: str, durable: str, work: Callable[[bytes], Awaitable[None]], *,
                 service: str, broker: Any, max_deliver: int, ack_wait: float, batch: int = 256, workers: int = 32,
                 give_up: Callable[[bytes, str], Awaitable[None]] | None = None,
                 readiness: Readiness | None = None, max_ack_pending: int = 20_000):
        self.subject, self.stream, self.durable, self.work = subject, stream, durable, work
        self.service, self.broker, self.max_deliver, self.ack_wait = service, broker, max_deliver, ack_wait
        self.batch, self.workers, self.give_up, self.readiness = batch, workers, give_up, readiness
        self.max_ack_pending = max_ack_pending
        self._task: asyncio.Task | None = None
        self._sub: Any = None
        self._stopping = False

    async def start(self, nc: Any) -> None:
        js = nc.jetstream()
        # `name` too: nats-py then creates it on `$JS.API.CONSUMER.CREATE.<stream>.<name>.<filter>`,
        # the form a per-consumer permission can name (bke.adapters.auth.permissions).
        cfg = ConsumerConfig(
            name=self.durable, durable_name=self.durable, ack_policy=AckPolicy.EXPLICIT, deliver_policy=DeliverPolicy.ALL,
            max_deliver=-1, ack_wait=self.ack_wait, filter_subject=self.subject, max_ack_pending=self.max_ack_pending,
        )
        # nats-py's pull_subscribe reuses an existing durable as it is: creating it again with
        # this config updates it (nats-server server/consumer.go, `updateConfig`, applies a new
        # AckWait), so a deployment made with the old 60 s ack wait gets the short one.
        with contextlib.suppress(Exception):
            await js.add_consumer(self.stream, cfg)
        sub = await js.pull_subscribe(self.subject, durable=self.durable, stream=self.stream, config=cfg)
        self._sub = sub
        self._task = asyncio.create_task(self._loop(sub), name=f"consume:{self.durable}")

    async def _loop(self, sub: Any) -> None:
        sem = asyncio.Semaphore(self.workers)

        async def one(m: Any) -> None:
            # from the fetch on: a message waiting for a free worker must not time out either
            keep = _KeepAlive(m, max(0.1, self.ack_wait / 3))
            try:
                async with sem:
                    await settle(_Delivery(m), self.work, broker=self.broker, service=self.service,  # type: ignore[arg-type]
                                 max_deliver=self.max_deliver, give_up=self.give_up, readiness=self.readiness)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - e.g. the ack itself while NATS is away
                # unsettled: the server redelivers it after the ack wait
                log.warning("could not settle a message: %s: %s", type(exc).__name__, exc,
                            extra={"consumer": self.durable, "rate_key": f"{self.service}:settle"})
            finally:
                keep.cancel()

        while not self._stopping:
            try:
                msgs = await sub.fetch(self.batch, timeout=1.0)
            except (nats.errors.TimeoutError, asyncio.TimeoutError):
                continue  # nothing to fetch within the second
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - a broken fetch must not end consumption
                if self._stopping:
                    return  # nats-py turns a cancelled fetch into ConnectionClosedError
                if is_unavailable(exc):
                    # NATS is away: the connection's callbacks report it; one line per outage
                    log.info("fetch waits for NATS", extra={"consumer": self.durable, "rate_key": f"{self.service}:fetch"})
                else:
                    log.exception("fetch failed", extra={"consumer": self.durable, "rate_key": f"{self.service}:fetch"})
                await asyncio.sleep(1.0)  # back-off before fetching again
                continue
            # one delivery that cannot even be settled (its dead letter refused, say) stays unacked
            # and comes back after ack_wait; it must never end this loop, and so the consumer
            for m, res in zip(msgs, await asyncio.gather(*(one(m) for m in msgs), return_exceptions=True)):
                if isinstance(res, Exception):
                    log.error("could not settle a message: %r", res, extra={"consumer": self.durable, "subject": m.subject})

    async def stop(self) -> None:
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._sub is not None:
            # otherwise the connection's drain waits forever on this subscription's queue
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
