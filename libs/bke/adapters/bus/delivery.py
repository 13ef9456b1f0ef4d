"""How a service settles one JetStream delivery, by the error it got (see bke.core.errors).

Nothing is lost and nothing blocks the queue:
- success acks;
- an outage of the store or the bus (`bke.core.errors.is_unavailable`: Redis unreachable, timing
  out or loading its AOF; NATS disconnected) is not the message's fault and is never counted as
  a failed delivery: the message is *held* (the consumer keeps sending in-progress acks, so the
  server neither redelivers nor counts it), the service reports itself not ready, and the
  handler runs again after a capped backoff until the store answers (a 20 s Redis outage once
  dead-lettered nine results whose commands had run, and the install never finished);
- a TemporaryError nacks with its delay; a NotYetKnown does too, but after its `max_tries`
  deliveries it is dead-lettered with its reason (a result for a command never recorded was
  once retried 402 times in six minutes);
- a MalformedMessage (bytes that are no message of the contract, so there is no one to answer)
  or an UnknownTarget (a cluster, node or command this deployment never made) goes to
  `bke.v1.deadletter.<service>` at once and acks;
- any other PermanentError has already been answered by the handler (a *.rejected / *.failed
  event) and acks;
- anything else (a bug) nacks with exponential backoff, and after the consumer's maximum
  deliveries the raw message goes to the dead-letter subject too, the service's `give_up` hook
  answers for the operation it belonged to (a `*.failed` event, so that nothing waits for it),
  and it is acked.

Log lines carry `rate_key` (service and error kind), so that the rate limiter of bke.adapters.logs
folds a flood of one kind of failure into a count instead of megabytes of log.
"""
from __future__ import annotations

import asyncio
import base64
import logging
from contextvars import ContextVar
from typing import Awaitable, Callable

from faststream.nats import NatsBroker, NatsMessage

from bke.contracts import DEADLETTER, DeadLettered
from bke.contracts.base import schema_headers
from bke.core.errors import MalformedMessage, NotYetKnown, PermanentError, TemporaryError, UnknownTarget, is_unavailable
from .message_version import set_delivery_headers
from .readiness import Readiness

__all__ = ["HOLD_BACKOFF_CAP_S", "settle", "backoff_delay", "delivery_subject", "outage_condition"]

log = logging.getLogger(__name__)
HOLD_BACKOFF_CAP_S = 5.0  # how long a held message waits at most between two tries of the store
# The subject of the delivery being handled: a handler that must trust the subject rather than
# the payload (an agent's result: NATS permissions bind the subject to the agent's identity,
# the payload says what anyone wrote) reads it here; typed handlers see only the message.
_SUBJECT: ContextVar[str] = ContextVar("bke_delivery_subject", default="")


def delivery_subject() -> str:
    """The subject of the message being settled in this task ("" outside `settle`)."""
    return _SUBJECT.get()


def backoff_delay(delivery: int, base: float = 0.5, cap: float = 30.0) -> float:
    return min(cap, base * 2 ** max(0, delivery - 1))


def outage_condition(exc: BaseException) -> str:
    """Which readiness condition an outage error belongs to: "redis" or "nats"."""
    cur: BaseException | None = exc
    while cur is not None:
        if type(cur).__module__.startswith("redis"):
            return "redis"
        if type(cur).__module__.startswith("nats"):
            return "nats"
        cur = cur.__cause__ or cur.__context__
    return "redis"  # a bare socket error in a handler: the handlers' store is Redis


def _delivery_count(msg: NatsMessage) -> int:
    meta = getattr(msg.raw_message, "metadata", None)
    return int(getattr(meta, "num_delivered", 1) or 1)


async def _run_holding(msg: NatsMessage, work: Callable[[bytes], Awaitable[None]], service: str, subject: str,
                       readiness: Readiness | None) -> None:
    """Run `work` until it ends with something other than an outage. The caller keeps the
    message alive with in-progress acks meanwhile (fast_consumer), so nothing is counted."""
    tries, cond = 0, ""
    while True:
        try:
            await work(msg.body)
        except Exception as exc:  # noqa: BLE001 - sorted right below
            if not is_unavailable(exc):
                _back(readiness, cond)  # the store answered: this failure is the message's own
                raise
            tries += 1
            cond = outage_condition(exc)
            if readiness is not None:
                readiness.set(cond, False, f"{cond} unreachable: {type(exc).__name__}: {exc}"[:300])
            log.warning("store unavailable, holding the message: %s: %s", type(exc).__name__, exc,
                        extra={"subject": subject, "rate_key": f"{service}:hold:{cond}", "tries": tries})
            delay = backoff_delay(tries, base=0.25, cap=HOLD_BACKOFF_CAP_S)
            if readiness is not None:
                await readiness.wait_for(cond, timeout=delay)  # at once when a probe sees it back
            else:
                await asyncio.sleep(delay)  # a capped backoff between tries of the store
            continue
        _back(readiness, cond)
        return


def _back(readiness: Readiness | None, cond: str) -> None:
    if cond and readiness is not None:
        readiness.set(cond, True)


async def settle(
    msg: NatsMessage,
    work: Callable[[bytes], Awaitable[None]],
    *,
    broker: NatsBroker,
    service: str,
    max_deliver: int,
    give_up: Callable[[bytes, str], Awaitable[None]] | None = None,
    readiness: Readiness | None = None,
) -> None:
    n = _delivery_count(msg)
    subject = msg.raw_message.subject
    _SUBJECT.set(subject)
    set_delivery_headers(getattr(msg.raw_message, "headers", None))  # the body's form (bke-schema)
    try:
        await _run_holding(msg, work, service, subject, readiness)
    except NotYetKnown as exc:
        if n >= exc.max_tries:
            log.error("dead-lettered after %d deliveries: %s", n, exc,
                      extra={"subject": subject, "rate_key": f"{service}:not-yet-known"})
            await _dead_letter(broker, service, subject, n, exc, msg.body)
            if give_up is not None:
                await _tell_giving_up(give_up, msg.body, exc, subject)
            await msg.ack()
        else:
            log.info("not known yet, retry later: %s", exc, extra={"subject": subject, "delivery": n})
            # growing delays: ten tries span about two and a half minutes, time enough for a
            # restarted dispatcher to record a command it had sent
            await msg.nack(delay=backoff_delay(n, base=exc.delay, cap=30.0))
        return
    except TemporaryError as exc:
        log.warning("retry later: %s", exc, extra={"subject": subject, "delivery": n,
                                                   "rate_key": f"{service}:temporary"})
        await msg.nack(delay=exc.delay)
        return
    except (MalformedMessage, UnknownTarget) as exc:
        what = "malformed message" if isinstance(exc, MalformedMessage) else "message for an unknown target"
        log.error("%s dead-lettered: %s", what, str(exc)[:500],
                  extra={"subject": subject, "rate_key": f"{service}:{type(exc).__name__}"})
        await _dead_letter(broker, service, subject, n, exc, msg.body)
        await msg.ack()
        return
    except PermanentError as exc:
        log.info("refused: %s", exc, extra={"subject": subject})
        await msg.ack()
        return
    except Exception as exc:  # noqa: BLE001 - the point is to never lose or wedge a message
        if n >= max_deliver:
            log.error("giving up after %d deliveries: %r", n, exc, extra={"subject": subject, "rate_key": f"{service}:give-up"})
            await _dead_letter(broker, service, subject, n, exc, msg.body)
            if give_up is not None:
                await _tell_giving_up(give_up, msg.body, exc, subject)
            await msg.ack()
        else:
            log.exception("delivery %d failed; will retry", n, extra={"subject": subject, "rate_key": f"{service}:failed"})
            await msg.nack(delay=backoff_delay(n))
        return
    await msg.ack()


async def _tell_giving_up(give_up: Callable[[bytes, str], Awaitable[None]], body: bytes, exc: BaseException,
                          subject: str) -> None:
    """The service's own answer for the operation the message belonged to (its `*.failed` event),
    so that the operation fails with a reason instead of waiting. Best effort: the message is
    already kept in the dead-letter stream."""
    try:
        await give_up(body, f"{type(exc).__name__}: {exc}"[:500])
    except Exception:  # noqa: BLE001 - the dead letter is the record; never wedge the queue
        log.exception("could not report giving up", extra={"subject": subject})


# The dead letter must fit in one NATS message after base64 (x4/3): nats-server's default
# max_payload is 1 MiB (server/const.go `MAX_PAYLOAD_SIZE = (1024 * 1024)`, used when the config
# sets no `max_payload`). A 900 KiB forged message made the publish fail with MaxPayloadError,
# which ended the consumer. 256 KiB kept is enough to see what the message was.
MAX_DEADLETTER_PAYLOAD = 256 * 1024


async def _dead_letter(broker: NatsBroker, service: str, subject: str, deliveries: int, exc: BaseException,
                       body: bytes) -> None:
    kept = body[:MAX_DEADLETTER_PAYLOAD]
    cut = f" [payload truncated: first {len(kept)} of {len(body)} bytes kept]" if len(kept) < len(body) else ""
    event = DeadLettered(
        subject=subject,
        service=service,
        deliveries=deliveries,
        reason=f"{type(exc).__name__}: {exc}"[:2000] + cut,
        payload_b64=base64.b64encode(kept).decode(),
    )
    await broker.publish(event.to_bytes(), f"{DEADLETTER}.{service}", stream="BKE_DEADLETTER", headers=schema_headers())
