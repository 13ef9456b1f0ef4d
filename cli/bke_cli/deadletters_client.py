"""The reading side of `bke deadletters`: the dead letters stored in BKE_DEADLETTER, by sequence.

A service that gives up on a message stores a `DeadLettered` on `bke.v1.deadletter.<service>`
(bke.adapters.bus.delivery). They are read here with JetStream's message get by sequence or subject
(`$JS.API.STREAM.MSG.GET.BKE_DEADLETTER`, granted to the operator identity only:
bke.adapters.auth.jetstream_grants.MESSAGE_READERS): no consumer, nothing acked or removed; the stream
keeps them until they age out.

Which service gave up is taken from the stored subject, which the services' permissions bind
(each may publish only its own `bke.v1.deadletter.<name>`), not from the body's `service` field,
which says whatever the body says. A stored body that is no `DeadLettered` is still listed, with
why it could not be read.

Errors::

    DeadLettersRefused   the server refused the message get: not the operator identity
    (nats-py's own)      NATS or JetStream unreachable, the stream missing: the caller says so
"""
from __future__ import annotations

import asyncio
import base64
import binascii
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from nats.aio.client import Client as NatsClient
from nats.js.api import RawStreamMsg, StreamState
from nats.js.errors import NotFoundError

from bke.adapters.bus.message_version import message_version, read_message
from bke.contracts import DEADLETTER, DeadLettered
from bke.core.errors import MalformedMessage, NotYetKnown

__all__ = ["STREAM", "DeadLetter", "DeadLetterReader", "DeadLettersRefused", "Refusals", "dead_letter", "service_subject"]

STREAM = "BKE_DEADLETTER"
T = TypeVar("T")


def service_subject(service: str) -> str:
    """Where a service's dead letters are stored."""
    return f"{DEADLETTER}.{service}"


@dataclass(frozen=True)
class DeadLetter:
    """One stored dead letter. Without a readable body, `unreadable` says why and the fields the
    body would have given are None."""

    seq: int
    time: datetime | None
    stored_subject: str  # bke.v1.deadletter.<service>: the service its permissions let store it
    subject: str | None = None  # the subject of the message given up on
    body_service: str | None = None  # the body's own `service` field
    deliveries: int | None = None
    reason: str | None = None
    payload_size: int | None = None
    payload: bytes | None = None  # the original bytes, kept only when asked (`show`)
    unreadable: str | None = None

    @property
    def service(self) -> str:
        return self.stored_subject.removeprefix(DEADLETTER + ".")


def dead_letter(seq: int, time: datetime | None, stored_subject: str, body: bytes,
                headers: Mapping[str, str] | None, keep_payload: bool = False) -> DeadLetter:
    """The dead letter that a stored message holds, read as any consumer reads a message (its
    `bke-schema` form, bke.adapters.bus.message_version); the payload is kept only when `keep_payload`."""
    base = DeadLetter(seq, time, stored_subject)
    try:
        letter = read_message(DeadLettered, body, message_version(headers))
    except (MalformedMessage, NotYetKnown) as exc:
        return _unreadable(base, str(exc))
    try:
        payload = base64.b64decode(letter.payload_b64, validate=True)
    except binascii.Error as exc:
        return _unreadable(base, f"payloadB64 is no base64: {exc}")
    return DeadLetter(seq, time, stored_subject, letter.subject, letter.service, letter.deliveries, letter.reason,
                      len(payload), payload if keep_payload else None)


def _unreadable(base: DeadLetter, why: str) -> DeadLetter:
    return DeadLetter(base.seq, base.time, base.stored_subject, unreadable=why)


class DeadLettersRefused(Exception):
    """The server refused this identity the message get (only the operator identity may)."""


class Refusals:
    """nats-py's error callback for the reader. A request the server refuses for permissions gets
    no reply, only an error on the connection: this notes it, so that the call ends at once
    instead of at its timeout."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.event = asyncio.Event()

    async def note(self, exc: Exception) -> None:  # nats-py wants a coroutine function
        if "permissions violation" in str(exc).lower():
            self.seen.append(str(exc))
            self.event.set()


class DeadLetterReader:
    """Reads BKE_DEADLETTER over one connection whose error callback is `refusals.note`."""

    def __init__(self, nc: NatsClient, refusals: Refusals) -> None:
        self.js = nc.jetstream()
        self.refusals = refusals

    async def _answer(self, call: Awaitable[T]) -> T:
        """The call's answer, or DeadLettersRefused as soon as the server reports a refusal."""
        task = asyncio.ensure_future(call)
        refused = asyncio.ensure_future(self.refusals.event.wait())
        try:
            done, _ = await asyncio.wait({task, refused}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            refused.cancel()
        if task in done:
            return task.result()
        task.cancel()
        raise DeadLettersRefused(self.refusals.seen[-1])

    async def state(self, subject: str | None = None) -> StreamState:
        """The stream's state; with `subject`, its count of that subject in `subjects`."""
        info = await self._answer(self.js.stream_info(STREAM, subjects_filter=subject))
        return info.state

    async def _get(self, **how: Any) -> RawStreamMsg | None:
        try:
            return await self._answer(self.js.get_msg(STREAM, **how))
        except NotFoundError:  # aged out, or no such sequence
            return None

    async def one(self, seq: int) -> DeadLetter | None:
        """The dead letter at `seq` with its payload, or None if the stream holds none there."""
        raw = await self._get(seq=seq)
        return None if raw is None else _letter(raw, keep_payload=True)

    async def newest(self, last: int, service: str | None = None) -> list[DeadLetter]:
        """The newest `last` dead letters (of `service` only, if given), newest first."""
        subject = service_subject(service) if service else None
        state = await self.state(subject)
        count = (state.subjects or {}).get(subject, 0) if subject else state.messages
        want = min(last, count)
        found: list[RawStreamMsg] = []
        if want and subject and count <= last:
            # every one of the service's is wanted: step forward through its own (next by
            # subject), one get per letter, however many of other services' lie between
            seq = state.first_seq
            while len(found) < want and (raw := await self._get(seq=seq, subject=subject, next=True)) is not None:
                found.append(raw)
                seq = (raw.seq or seq) + 1
            found.reverse()
        elif want:
            # back from the newest (the service's newest, found by subject), over gaps (aged
            # out, deleted) and other services' letters
            newest = await self._get(subject=subject) if subject else None
            seq = (newest.seq or 0) if newest else state.last_seq
            while len(found) < want and seq >= state.first_seq:
                raw = await self._get(seq=seq)
                seq -= 1
                if raw is not None and (subject is None or raw.subject == subject):
                    found.append(raw)
        return [_letter(raw) for raw in found]


def _letter(raw: RawStreamMsg, keep_payload: bool = False) -> DeadLetter:
    return dead_letter(raw.seq or 0, raw.time, raw.subject or "", raw.data or b"", raw.headers, keep_payload)
