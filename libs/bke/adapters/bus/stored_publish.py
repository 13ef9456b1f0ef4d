"""A publish that returns once its stream stored the message (the PubAck), for what the next step
waits on: a command to an agent, an event or a command another service consumes.

Why not a core publish: a message sent to a stream's subject while that stream has no leader (a
node of a NATS cluster lost: a few seconds of election) is stored by no one and dropped without a
word. The dispatcher then recorded a command as sent and waited for ever for its answer.

A JetStream publish is answered: stored (its PubAck), or "no responders" (no leader, nats-py's
NoStreamResponseError), a 503, or nothing in time (a timeout; the message may have been stored).
Those outages (bke.core.errors.is_unavailable) are retried under one message id until
`RETRY_WITHIN_S` has passed, then raised: the caller's own retry takes over (a redelivery, a
reconcile step run again). The message id makes the retries safe: a stream that stored the message
before its PubAck was lost takes the retry as a duplicate (within the streams' duplicate window,
bke.adapters.bus.streams), never as a second copy. A caller's own `Nats-Msg-Id` is kept (its
retries of the same decision are dropped the same way); otherwise one is made per call.

One try is nats-py's `publish_async` where the JetStream has it (one shared reply subscription
for every PubAck, a future per message) and `publish` otherwise: the same PubAck, awaited for at
most ACK_TIMEOUT_S, without a request's own inbox token and timeout task per message. A caller
with many messages (a phase's chunk of commands) awaits its publishes side by side.

Errors::

    anything is_unavailable, past RETRY_WITHIN_S   raised as is (an outage: redelivered, not counted)
    anything else (a refused publish, a bad stream)  raised at once
"""
from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import nats.errors

from bke.core.errors import is_unavailable

__all__ = ["ACK_TIMEOUT_S", "MSG_ID", "RETRY_WITHIN_S", "publish_stored"]

log = logging.getLogger("bke.adapters.bus.stored_publish")

MSG_ID = "Nats-Msg-Id"
ACK_TIMEOUT_S = 5.0  # one PubAck: a loaded stream leader answers in milliseconds, not seconds
# Longer than a leader election of a 3-node cluster (nats-server's election timeout is a few
# seconds), shorter than the streams' duplicate window (120 s) so that every retry is deduplicated.
RETRY_WITHIN_S = 30.0
FIRST_BACKOFF_S, MAX_BACKOFF_S = 0.1, 2.0


class JetStream(Protocol):
    async def publish(self, subject: str, payload: bytes = b"", timeout: float | None = None,
                      stream: str | None = None, headers: dict[str, Any] | None = None) -> Any: ...


async def _stored_once(js: JetStream, subject: str, payload: bytes, headers: dict[str, str]) -> None:
    """One try: returns once the PubAck came (module docstring)."""
    publish_async = getattr(js, "publish_async", None)
    if publish_async is None:
        await js.publish(subject, payload, timeout=ACK_TIMEOUT_S, headers=headers)
        return
    ack = await publish_async(subject, payload, headers=headers)
    try:
        await asyncio.wait_for(ack, ACK_TIMEOUT_S)  # on a timeout the pending PubAck is given up
    except asyncio.TimeoutError:
        raise nats.errors.TimeoutError from None  # as `publish` says it: an outage, tried again


async def publish_stored(js: JetStream, subject: str, payload: bytes, headers: dict[str, str], *,
                         within: float = RETRY_WITHIN_S, clock: Callable[[], float] = time.monotonic,
                         sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
    """Publish `payload` on `subject` and return once a stream has stored it (module docstring)."""
    headers = headers if MSG_ID in headers else {**headers, MSG_ID: uuid.uuid4().hex}
    deadline, backoff = clock() + within, FIRST_BACKOFF_S
    while True:
        try:
            await _stored_once(js, subject, payload, headers)
            return
        except Exception as exc:  # noqa: BLE001 - only an outage is retried; the rest is raised at once
            if not is_unavailable(exc) or clock() + backoff > deadline:
                raise
            log.warning("not stored yet (NATS: %s); publishing again", type(exc).__name__,
                        extra={"subject": subject, "rate_key": "publish:not-stored"})
        await sleep(backoff)  # a backoff between tries, not a wait for an event
        backoff = min(backoff * 2, MAX_BACKOFF_S)
