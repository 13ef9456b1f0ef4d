"""How a service settles one JetStream delivery, by the error it got (see bke.errors).

Nothing is lost and nothing blocks the queue: success acks; a TemporaryError nacks with
its delay; a MalformedMessage (bytes that are no message of the contract, so there is no one to
answer) goes to `bke.v1.deadletter.<service>` at once and acks; any other PermanentError has
already been answered by the handler (a *.rejected / *.failed event) and acks; anything else
nacks with exponential backoff, and after the consumer's maximum deliveries the raw message goes
to the dead-letter subject too, the service's `give_up` hook answers for the operation it belonged
to (a `*.failed` event, so that nothing waits for it), and it is acked.
"""
from __future__ import annotations

import base64
import logging
from contextvars import ContextVar
from typing import Awaitable, Callable

from faststream.nats import NatsBroker, NatsMessage

from ..contracts import DEADLETTER, DeadLettered
from ..errors import MalformedMessage, PermanentError, TemporaryError

__all__ = ["settle", "backoff_delay", "delivery_subject"]

log = logging.getLogger(__name__)
# The subject of the delivery being handled: a handler that must trust the subject rather than
# the payload (an agent's result: NATS permissions bind the subject to the agent's identity,
# the payload says what anyone wrote) reads it here; typed handlers see only the message.
_SUBJECT: ContextVar[str] = ContextVar("bke_delivery_subject", default="")


def delivery_subject() -> str:
    """The subject of the message being settled in this task ("" outside `settle`)."""
    return _SUBJECT.get()


def backoff_delay(delivery: int, base: float = 0.5, cap: float = 30.0) -> float:
    return min(cap, base * 2 ** max(0, delivery - 1))


def _delivery_count(msg: NatsMessage) -> int:
    meta = getattr(msg.raw_message, "metadata", None)
    return int(getattr(meta, "num_delivered", 1) or 1)


async def settle(
    msg: NatsMessage,
    work: Callable[[bytes], Awaitable[None]],
    *,
    broker: NatsBroker,
    service: str,
    max_deliver: int,
    give_up: Callable[[bytes, str], Awaitable[None]] | None = None,
) -> None:
    n = _delivery_count(msg)
    subject = msg.raw_message.subject
    _SUBJECT.set(subject)
    try:
        await work(msg.body)
    except TemporaryError as exc:
        log.warning("retry later: %s", exc, extra={"subject": subject, "delivery": n})
        await msg.nack(delay=exc.delay)
        return
    except MalformedMessage as exc:
        log.error("malformed message dead-lettered: %s", str(exc)[:500], extra={"subject": subject})
        await _dead_letter(broker, service, subject, n, exc, msg.body)
        await msg.ack()
        return
    except PermanentError as exc:
        log.info("refused: %s", exc, extra={"subject": subject})
        await msg.ack()
        return
    except Exception as exc:  # noqa: BLE001 - the point is to never lose or wedge a message
        if n >= max_deliver:
            log.error("giving up after %d deliveries: %r", n, exc, extra={"subject": subject})
            await _dead_letter(broker, service, subject, n, exc, msg.body)
            if give_up is not None:
                await _tell_giving_up(give_up, msg.body, exc, subject)
            await msg.ack()
        else:
            log.exception("delivery %d failed; will retry", n, extra={"subject": subject})
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


async def _dead_letter(broker: NatsBroker, service: str, subject: str, deliveries: int, exc: BaseException,
                       body: bytes) -> None:
    event = DeadLettered(
        subject=subject,
        service=service,
        deliveries=deliveries,
        reason=f"{type(exc).__name__}: {exc}"[:2000],
        payload_b64=base64.b64encode(body).decode(),
    )
    await broker.publish(event.to_bytes(), f"{DEADLETTER}.{service}", stream="BKE_DEADLETTER")
