"""Publishing an agent's outputs (results, registrations, refusals) into JetStream, trying again
while the stream cannot take them.

Why try again: the outputs' stream (BKE_AGENT_OUT, bke.adapters.bus.streams) refuses a new
message when it is full rather than dropping someone else's, and answers that with a 503
("maximum bytes exceeded") until its consumers have taken what it holds; a NATS node of a
cluster that is lost gives a few seconds of the same while the stream elects a new leader.
Both are outages (bke.core.errors.is_unavailable), not the message's fault. Anything else (a
message larger than the stream takes, a permission refused) is raised at once: sending it
again would be refused again.

The backoff doubles from `FIRST_DELAY_S` up to `MAX_DELAY_S` between attempts, for about
`retry_s` in all (the agent's `result_retry_s`); then the last error is raised, and the caller
hands the command back (it is redelivered and answered from the journal) or, at start, fails.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from nats.js import JetStreamContext

from bke.contracts.base import schema_headers
from bke.core.errors import is_unavailable

__all__ = ["FIRST_DELAY_S", "MAX_DELAY_S", "publish_output"]

log = logging.getLogger("bke.agent")
FIRST_DELAY_S = 0.25
MAX_DELAY_S = 2.0  # a full stream drains as fast as its consumers ack: seconds, not minutes


async def publish_output(js: JetStreamContext, subject: str, body: bytes, *, retry_s: float, what: str,
                         ids: Mapping[str, object]) -> None:
    """Publish `body` on `subject` and wait for JetStream to store it, trying again while the
    stream is away or full (see the module docstring)."""
    delay, waited = FIRST_DELAY_S, 0.0
    while True:
        try:
            await js.publish(subject, body, headers=schema_headers())
            return
        except Exception as exc:
            if not is_unavailable(exc) or waited >= retry_s:
                raise
            log.warning("%s not stored (NATS: %s: %s); sending it again", what, type(exc).__name__, exc,
                        extra={**ids, "rate_key": f"agent-output:{what}"})
        await asyncio.sleep(delay)  # backoff between attempts while the stream drains or elects a leader
        waited += delay
        delay = min(2 * delay, MAX_DELAY_S)
