"""Messages carry their form's version (`bke-schema`): a consumer reads the current and older
forms (converting through the registry) and refuses a newer one with a reason, never misreads
it (bke.adapters.bus.message_version)."""
from __future__ import annotations

import base64
import json
from types import SimpleNamespace

import pytest

from bke.adapters.bus.delivery import settle
from bke.adapters.bus.handler import Out, typed
from bke.adapters.bus.message_version import (
    TOO_NEW_TRIES, MessageTooNew, MessageTooOld, message_version, read_as_sent, read_message, set_delivery_headers,
)
from bke.contracts.base import MESSAGE_SCHEMA, SCHEMA_HEADER, Message, schema_headers
from bke.core.errors import MalformedMessage


class Ping(Message):
    cluster: str
    count: int


BODY = Ping(cluster="c", count=3).to_bytes()


def test_every_publisher_header_names_this_codes_form_and_keeps_the_others():
    assert schema_headers({"Nats-Msg-Id": "x"}) == {"Nats-Msg-Id": "x", SCHEMA_HEADER: str(MESSAGE_SCHEMA)}
    assert message_version(schema_headers()) == MESSAGE_SCHEMA


def test_a_message_without_the_header_is_form_0_and_read_as_is():
    assert message_version(None) == 0 and message_version({}) == 0
    assert read_message(Ping, BODY, 0) == Ping(cluster="c", count=3)


def test_a_newer_form_is_refused_with_the_reason_and_retried_a_bounded_number_of_times():
    with pytest.raises(MessageTooNew) as err:
        read_message(Ping, BODY, MESSAGE_SCHEMA + 1)
    assert f"Ping in message form {MESSAGE_SCHEMA + 1}" in str(err.value)
    assert "newer than this service reads" in str(err.value)
    assert err.value.max_tries == TOO_NEW_TRIES  # another replica, of the new version, may take it meanwhile


def test_a_header_that_is_no_number_is_refused_not_guessed():
    with pytest.raises(MessageTooNew, match="'two' is not a version number"):
        message_version({SCHEMA_HEADER: "two"})


def test_an_older_form_is_converted_step_by_step_through_the_registry():
    # the field was `total` in form 0, `n` in form 1 and is `count` in form 2: two steps
    converters = {("Ping", 0): lambda d: {**{k: v for k, v in d.items() if k != "total"}, "n": d["total"]},
                  ("Ping", 1): lambda d: {**{k: v for k, v in d.items() if k != "n"}, "count": d["n"]}}
    old = json.dumps({"cluster": "c", "total": 7}).encode()
    assert read_message(Ping, old, 0, converters, current=2) == Ping(cluster="c", count=7)
    # a step without a converter: the form did not change for this model
    assert read_message(Ping, BODY, 1, {("Other", 1): lambda d: {}}, current=2) == Ping(cluster="c", count=3)
    # a converted message that still is no Ping is malformed, saying it was converted
    with pytest.raises(MalformedMessage, match="converted from form 0"):
        read_message(Ping, json.dumps({"cluster": "c"}).encode(), 0, {("Ping", 0): lambda d: d}, current=1)


def test_read_as_sent_says_whether_a_converter_changes_the_body():
    converters = {("Ping", 0): lambda d: d}
    assert read_as_sent(Ping, 0, {}, current=2)  # no converter: the bytes are the message
    assert not read_as_sent(Ping, 0, converters, current=2)
    assert read_as_sent(Ping, 1, converters, current=2)  # past the only converting step
    assert read_as_sent(Ping, 1, {("Other", 1): lambda d: d}, current=2)
    assert not read_as_sent(Ping, 3, {}, current=2)  # newer: not read at all


def test_a_form_older_than_any_this_code_reads_is_refused():
    with pytest.raises(MessageTooOld, match=r"older than this service reads \(1\.\.2\)"):
        read_message(Ping, BODY, 0, {}, current=2, readable_from=1)


async def test_typed_reads_the_delivery_header_and_never_answers_a_newer_form_as_a_users_mistake():
    seen: list[Ping] = []
    refused: list[bytes] = []

    async def handler(msg: Ping) -> list[Out]:
        seen.append(msg)
        return []

    published: list[dict[str, str]] = []

    async def publish(body: bytes, subject: str, headers: dict[str, str]) -> None:
        published.append(headers)

    work = typed(Ping, handler, publish, refuse=lambda body: refused.append(body) or [])
    set_delivery_headers({})  # an old publisher's message: no header
    await work(BODY)
    set_delivery_headers({SCHEMA_HEADER: str(MESSAGE_SCHEMA)})
    await work(BODY)
    assert seen == [Ping(cluster="c", count=3)] * 2
    set_delivery_headers({SCHEMA_HEADER: str(MESSAGE_SCHEMA + 1)})
    with pytest.raises(MessageTooNew):
        await work(BODY)
    assert refused == [] and len(seen) == 2


class _Msg:
    def __init__(self, delivered: int, headers: dict[str, str]):
        self.raw_message = SimpleNamespace(subject="bke.v1.plan.created", headers=headers,
                                           metadata=SimpleNamespace(num_delivered=delivered))
        self.body = BODY
        self.acked, self.nacks = 0, []

    async def ack(self) -> None:
        self.acked += 1

    async def nack(self, delay: float | None = None) -> None:
        self.nacks.append(delay)


class _Broker:
    def __init__(self):
        self.published: list[tuple[str, bytes, dict[str, str] | None]] = []

    async def publish(self, payload: bytes, subject: str, stream: str | None = None,
                      headers: dict[str, str] | None = None) -> None:
        self.published.append((subject, payload, headers))


async def test_a_newer_form_is_nacked_then_dead_lettered_with_its_reason_and_the_operation_told():
    told: list[str] = []

    async def give_up(body: bytes, reason: str) -> None:
        told.append(reason)

    async def handler(msg: Ping) -> None:
        raise AssertionError("a newer form must never reach the handler")

    async def publish(body: bytes, subject: str, headers: dict[str, str]) -> None:
        raise AssertionError("nothing to publish")

    work = typed(Ping, handler, publish)
    newer = {SCHEMA_HEADER: str(MESSAGE_SCHEMA + 1)}
    for n in range(1, TOO_NEW_TRIES):
        msg, broker = _Msg(n, newer), _Broker()
        await settle(msg, work, broker=broker, service="renderer", max_deliver=10, give_up=give_up)  # type: ignore[arg-type]
        assert (msg.acked, len(msg.nacks), broker.published, told) == (0, 1, [], [])
    last, broker = _Msg(TOO_NEW_TRIES, newer), _Broker()
    await settle(last, work, broker=broker, service="renderer", max_deliver=10, give_up=give_up)  # type: ignore[arg-type]
    assert last.acked == 1
    [(subject, payload, headers)] = broker.published
    dead = json.loads(payload)
    assert subject == "bke.v1.deadletter.renderer" and headers == schema_headers()
    assert "newer than this service reads" in dead["reason"] and base64.b64decode(dead["payloadB64"]) == BODY
    assert len(told) == 1 and "MessageTooNew" in told[0]


async def test_settle_gives_each_delivery_its_own_headers():
    """An unversioned message after a versioned one in the same task is read as form 0 (the
    context variable is reset per delivery, not left from the last)."""
    got: list[Ping] = []

    async def handler(msg: Ping) -> None:
        got.append(msg)

    async def publish(body: bytes, subject: str, headers: dict[str, str]) -> None:
        return None

    work = typed(Ping, handler, publish)
    for headers in ({SCHEMA_HEADER: str(MESSAGE_SCHEMA + 1)}, None):
        msg = _Msg(TOO_NEW_TRIES, headers)  # type: ignore[arg-type]
        await settle(msg, work, broker=_Broker(), service="renderer", max_deliver=10)  # type: ignore[arg-type]
    assert got == [Ping(cluster="c", count=3)]
