"""Core NATS request/reply: a subject answered by a function of the request's bytes. Every
service's requests are served here (the dispatcher's status and command key, the certs
service's expiry and provisioning, the planner's diff, the upgrader's records and pieces).

    serve_requests(svc, subject, queue, answer)      answer(subject, body) -> the reply's bytes
    typed_answer(Model, handle, invalid)             such an answer from handle(Model) -> reply model

Not stored (no JetStream): the requester waits for the reply. One replica of the queue group
answers each request, and only on an inbox (replies.answerable). The subscription is made when
the service has started (its `after_start`) and ended when it stops (its `before_stop`, so that
the other replicas take the requests while this one drains). `answer` answers a bad request or
an outage too (a StatusError, say), so that a requester never waits out its timeout.
"""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from pydantic import ValidationError

from bke.contracts.base import Message

from .replies import answerable
from .service import Service

__all__ = ["Answer", "serve_requests", "typed_answer"]

Answer = Callable[[str, bytes], Awaitable[bytes]]
M = TypeVar("M", bound=Message)


def typed_answer(model: type[M], handle: Callable[[M], Awaitable[Message]],
                 invalid: Callable[[str], Message]) -> Answer:
    """The answer of a handler of one typed request: the body parsed as `model` and handed to
    `handle`, whose reply is sent. A body that is no `model` is answered `invalid(reason)`, the
    reason naming the first wrong field ("node: Field required"), not left to a timeout."""

    async def answer(subject: str, body: bytes) -> bytes:
        try:
            req = model.model_validate_json(body)
        except ValidationError as exc:
            err = exc.errors(include_url=False)[0]
            field = ".".join(str(p) for p in err["loc"]) or "request"
            return invalid(f"{field}: {err['msg']}").to_bytes()
        return (await handle(req)).to_bytes()

    return answer


def serve_requests(svc: Service, subject: str, queue: str, answer: Answer) -> None:
    subs: list[Any] = []

    async def on_request(msg: Any) -> None:
        if answerable(msg):  # a publish without a reply inbox asks nothing
            await msg.respond(await answer(msg.subject, msg.data))

    async def subscribe() -> None:
        subs.append(await svc.nc.subscribe(subject, queue=queue, cb=on_request))

    async def unsubscribe() -> None:
        running, subs[:] = list(subs), []
        if not running or svc.nc.is_closed:  # closed for good by NATS: nothing left to end
            return
        for sub in running:
            await sub.unsubscribe()

    svc.requests.append((subject, queue))
    svc.after_start.append(subscribe)
    svc.before_stop.append(unsubscribe)
