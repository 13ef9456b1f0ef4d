"""The one handler shape: a function of a typed message that returns what to publish.

    async def on_plan(ev: PlanCreated) -> list[Out]: ...

The wiring (`Service.work_subscriber` / `fast_subscriber` with `model=`) turns bytes into the
message in the form its `bke-schema` header names (converted if older, refused if newer:
bke.adapters.bus.message_version), sends bytes that are no message of the contract to the dead-letter stream with the
reason (`MalformedMessage`, see delivery.settle), calls the handler and publishes what it
returned, in order. Handlers never see bytes or a broker, so they are tested as plain functions.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Awaitable, Callable, Sequence, TypeVar

from pydantic import ValidationError

from bke.contracts.base import Message
from bke.core.errors import MalformedMessage
from .message_version import MessageTooOld, delivery_headers, message_version, read_message

__all__ = ["Out", "Publish", "deprecated", "first_of", "parse", "typed"]

log = logging.getLogger(__name__)
M = TypeVar("M", bound=Message)
Publish = Callable[[bytes, str, dict[str, str]], Awaitable[None]]


@dataclass(frozen=True)
class Out:
    """One message a handler wants published."""

    message: Message
    subject: str
    msg_id: str | None = None  # JetStream de-duplication: a redelivered input publishes the same id
    live: bool = False  # progress for whoever listens: core NATS, no PubAck awaited


def parse(model: type[M], body: bytes) -> M:
    """The message, or MalformedMessage naming the contract and what is wrong with it."""
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        raise MalformedMessage(f"malformed {model.__name__}: {exc}") from exc


def first_of(body: bytes, *models: type[Message]) -> Message:
    """The message, read as the first of these contracts it fits (a give-up hook gets the raw
    bytes of whichever subject it serves)."""
    for model in models[:-1]:
        try:
            return model.model_validate_json(body)
        except ValidationError:
            continue
    return parse(models[-1], body)


def typed(model: type[M], handler: Callable[[M], Awaitable[Sequence[Out] | None]], publish: Publish,
          notify: Publish | None = None, refuse: Callable[[bytes], Sequence[Out]] | None = None,
          ) -> Callable[[bytes], Awaitable[None]]:
    """Bytes in, the handler's messages out: what a subscriber runs for each delivery. `refuse`
    answers bytes that are no message (a user's request is told which field is wrong) instead of
    dead-lettering them."""

    async def work(body: bytes) -> None:
        # the version check comes first: a too new or too old form is no user's wrong field
        version = message_version(delivery_headers())
        try:
            msg = read_message(model, body, version)
        except MessageTooOld:
            raise
        except MalformedMessage:
            if refuse is None:
                raise
            outs: Sequence[Out] | None = refuse(body)
        else:
            outs = await handler(msg)
        for out in outs or ():
            send = notify if out.live and notify is not None else publish
            await send(out.message.to_bytes(), out.subject, {"Nats-Msg-Id": out.msg_id} if out.msg_id else {})

    work.__name__ = getattr(handler, "__name__", "work")
    return work


def deprecated(old: str, new: str, work: Callable[[bytes], Awaitable[None]]) -> Callable[[bytes], Awaitable[None]]:
    """`work` for a message that came on a subject's old name: handled the same, with a warning."""

    async def on_old_subject(body: bytes) -> None:
        log.warning("message on deprecated subject %s: publish on %s (the old name goes with bke.v2)", old, new,
                    extra={"subject": old})
        await work(body)

    return on_old_subject
