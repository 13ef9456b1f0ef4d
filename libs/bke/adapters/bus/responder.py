"""Core NATS request/reply: a subject answered by a function of the request's bytes.

    serve_requests(svc, subject, queue, answer)      answer(subject, body) -> the reply's bytes

Not stored (no JetStream): the requester waits for the reply. One replica of the queue group
answers each request, and only on an inbox (replies.answerable). The subscription is made when
the service has started (its `after_start`). `answer` answers a bad request or an outage too
(a StatusError, say), so that a requester never waits out its timeout.
"""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from .replies import answerable
from .service import Service

__all__ = ["serve_requests"]


def serve_requests(svc: Service, subject: str, queue: str, answer: Callable[[str, bytes], Awaitable[bytes]]) -> None:
    async def on_request(msg: Any) -> None:
        if answerable(msg):  # a publish without a reply inbox asks nothing
            await msg.respond(await answer(msg.subject, msg.data))

    async def subscribe() -> None:
        await svc.nc.subscribe(subject, queue=queue, cb=on_request)

    svc.after_start.append(subscribe)
