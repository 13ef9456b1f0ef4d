"""Which form a message body is in, and what a reader does with one it was not written for.

Why: services are replaced one at a time (a rolling deployment), so for a while an old and a
new version of a service share the same durable consumers and streams, and a new one reads
what the old one left in them. A body form can change (a field renamed, a unit changed); a
reader must never misread a form it does not know.

Design (the same rules as the stored records', bke.core.state.schema, applied to messages; the
"upcaster" of event-sourced systems: old events are converted on read, step by step, never
rewritten in the stream):
  - every publisher sends the `bke-schema: <n>` header (bke.contracts.base.schema_headers);
    a message without it was written before the header existed: version 0 (the form of 1);
  - every consumer reads through `bke.adapters.bus.handler.typed`, which calls `read_message` here;
  - a message NEWER than MESSAGE_SCHEMA is refused with `MessageTooNew`: retried a few times
    (during a rolling replacement a replica of the new version may take it from the same
    durable consumer), then dead-lettered with the reason and the service's give-up hook
    answers for the operation (bke.adapters.bus.delivery.settle) - never misread;
  - an OLDER message is converted one version at a time by the converters registered in
    CONVERTERS[(model name, from version)] (payload dict -> payload dict of the next version);
    a step with no converter means the form did not change for that model, unless the version
    is older than READABLE_FROM: then it is refused with `MessageTooOld` (dead-lettered at once,
    naming the versions this code reads).

A new message form: bump MESSAGE_SCHEMA, register a converter for each model whose form
changed, and raise READABLE_FROM only when the converters of older steps are removed.

Errors::

    NotYetKnown
     └─ MessageTooNew    a newer BKE wrote it: another replica may read it, else dead-lettered
    MalformedMessage
     └─ MessageTooOld    older than any form this code converts: dead-lettered at once
"""
from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from typing import Any, TypeVar

from pydantic import ValidationError

from bke.contracts.base import MESSAGE_SCHEMA, SCHEMA_HEADER, Message
from bke.core.errors import MalformedMessage, NotYetKnown

__all__ = [
    "CONVERTERS", "Converter", "MessageTooNew", "MessageTooOld", "READABLE_FROM", "UNVERSIONED",
    "delivery_headers", "message_version", "read_as_sent", "read_message", "set_delivery_headers",
]

M = TypeVar("M", bound=Message)
Converter = Callable[[dict[str, Any]], dict[str, Any]]

UNVERSIONED = 0  # the version of a message without the header
READABLE_FROM = 0  # the oldest version this code reads (converting where CONVERTERS says)
# (model class name, from version) -> payload of version + 1. None yet: version 0 and 1 differ
# only by the header.
CONVERTERS: dict[tuple[str, int], Converter] = {}
# A replica of the new version gets this many deliveries' chance to take a newer message
# before it is dead-lettered (the delays grow: bke.adapters.bus.delivery.backoff_delay).
TOO_NEW_TRIES = 5


# The headers of the delivery being handled in this task, set by bke.adapters.bus.delivery.settle: typed
# handlers see only bytes, and the version is read where the bytes are turned into a message.
_HEADERS: ContextVar[Mapping[str, str] | None] = ContextVar("bke_delivery_headers", default=None)


def set_delivery_headers(headers: Mapping[str, str] | None) -> None:
    _HEADERS.set(dict(headers) if headers else {})


def delivery_headers() -> Mapping[str, str]:
    """The headers of the message being settled in this task (empty outside `settle`)."""
    return _HEADERS.get() or {}


class MessageTooNew(NotYetKnown):
    def __init__(self, message: str) -> None:
        super().__init__(message, delay=2.0, max_tries=TOO_NEW_TRIES)


class MessageTooOld(MalformedMessage):
    pass


def message_version(headers: Mapping[str, str] | None) -> int:
    """The `bke-schema` header's version (UNVERSIONED without one); a header that is no
    number is refused like an unknown version rather than guessed."""
    raw = (headers or {}).get(SCHEMA_HEADER)
    if raw is None:
        return UNVERSIONED
    try:
        return int(raw)
    except ValueError:
        raise MessageTooNew(f"message header {SCHEMA_HEADER}: {raw!r} is not a version number") from None


def read_as_sent(model: type[Message], version: int,
                 converters: Mapping[tuple[str, int], Converter] | None = None,
                 current: int = MESSAGE_SCHEMA) -> bool:
    """Whether `read_message` reads a body of form `version` as it is (no converter applies):
    then the message read is what those bytes say (an agent verifies a command's signature over
    them, bke.core.secrets.signing.signed_part)."""
    table = CONVERTERS if converters is None else converters
    return version <= current and not any((model.__name__, v) in table for v in range(version, current))


def read_message(model: type[M], body: bytes, version: int,
                 converters: Mapping[tuple[str, int], Converter] | None = None,
                 current: int = MESSAGE_SCHEMA, readable_from: int = READABLE_FROM) -> M:
    """The message of `model` that `body`, written in form `version`, says (module docstring)."""
    name = model.__name__
    if version > current:
        raise MessageTooNew(f"{name} in message form {version} ({SCHEMA_HEADER} header), newer than this "
                            f"service reads ({readable_from}..{current}): it was sent by a newer BKE; "
                            f"run that version of this service")
    if version < readable_from:
        raise MessageTooOld(f"{name} in message form {version} ({SCHEMA_HEADER} header), older than this "
                            f"service reads ({readable_from}..{current})")
    table = CONVERTERS if converters is None else converters
    steps = [table[(name, v)] for v in range(version, current) if (name, v) in table]
    if not steps:
        return _parse(model, body)
    try:
        doc = json.loads(body)
    except ValueError as exc:
        raise MalformedMessage(f"malformed {name} (form {version}): {exc}") from exc
    if not isinstance(doc, dict):
        raise MalformedMessage(f"malformed {name} (form {version}): not a JSON object")
    for step in steps:
        doc = step(doc)
    return _parse(model, json.dumps(doc).encode(), f" (converted from form {version})")


def _parse(model: type[M], body: bytes, how: str = "") -> M:
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        raise MalformedMessage(f"malformed {model.__name__}{how}: {exc}") from exc
