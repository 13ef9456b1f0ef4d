"""Publishing an agent's outputs (results, registrations, refusals) into JetStream, trying again
while the stream cannot take them.

Why try again: the outputs' stream (BKE_AGENT_OUT, bke.adapters.bus.streams) refuses a new
message when it is full rather than dropping someone else's, and answers that with a 503
("maximum bytes exceeded") until its consumers have taken what it holds; a NATS node of a
cluster that is lost gives a few seconds of the same while the stream elects a new leader.
Both are outages (bke.core.errors.is_unavailable), not the message's fault. Anything else (a
message larger than the stream takes, a permission refused) is raised at once: sending it
again would be refused again.

A result larger than the stream takes (bke.adapters.bus.quotas.AGENT_OUTPUT_MAX_MSG) would be
refused for ever, and its command handed back and answered from the journal again and again:
`fit_result` cuts its steps' outputs shorter (their tails are kept: where a program says why it
failed) until it fits.

The backoff doubles from `FIRST_DELAY_S` up to `MAX_DELAY_S` between attempts, for about
`retry_s` in all (the agent's `result_retry_s`); then the last error is raised, and the caller
hands the command back (it is redelivered and answered from the journal) or, at start, fails.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from nats.js import JetStreamContext

from bke.adapters.bus.quotas import AGENT_OUTPUT_MAX_MSG
from bke.contracts.agent import CommandResult
from bke.contracts.base import schema_headers
from bke.core.errors import is_unavailable

__all__ = ["FIRST_DELAY_S", "MAX_DELAY_S", "RESULT_MOST", "fit_result", "publish_output", "result_body"]

log = logging.getLogger("bke.agent")
FIRST_DELAY_S = 0.25
MAX_DELAY_S = 2.0  # a full stream drains as fast as its consumers ack: seconds, not minutes
RESULT_MOST = AGENT_OUTPUT_MAX_MSG - 4096  # room for the subject and the headers
_KEEP_STEPS = (1024, 128, 0)  # bytes of each step's stdout and stderr, tried in turn


def fit_result(result: CommandResult, most: int = RESULT_MOST) -> CommandResult:
    """`result`, or a copy whose steps' outputs are cut to their last bytes so that its body is
    at most `most` bytes (with no output at all, if that is what it takes)."""
    if len(result.to_bytes()) <= most:
        return result
    for keep in _KEEP_STEPS:
        cut = result.model_copy(update={"steps": [
            s.model_copy(update={"stdout": _tail(s.stdout, keep), "stderr": _tail(s.stderr, keep)}) for s in result.steps]})
        if len(cut.to_bytes()) <= most or keep == 0:
            return cut
    return result  # not reached: the last try keeps no output


def result_body(result: CommandResult, most: int = RESULT_MOST) -> bytes:
    """The body to publish for `result`: its own bytes, written once, or those of its copy cut to
    fit (`fit_result`) when they are over `most`."""
    body = result.to_bytes()
    return body if len(body) <= most else fit_result(result, most).to_bytes()


def _tail(text: str, keep: int) -> str:
    data = text.encode()
    if len(data) <= keep:
        return text
    return "[cut to fit the outputs' stream] " + data[len(data) - keep:].decode(errors="ignore") if keep else ""


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
