"""Every message contract of bke.contracts.subjects.CHANNELS against generated and hostile
bytes: valid messages round-trip; anything else is refused as MalformedMessage (through
bke.adapters.bus.handler `parse`/`typed`) naming the field, never another exception and never a call of
the handler. Budget: see tests/badinput/fuzz.py (BKE_FUZZ=long for the long run)."""
from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bke.adapters.bus.handler import parse, typed
from bke.contracts.base import Message
from bke.contracts.subjects import CHANNELS
from bke.core.errors import MalformedMessage

from .bus_corpus import hostile_bodies, valid_example
from .fuzz import FUZZ, from_schema, json_values

MODELS = sorted({ch.model for ch in CHANNELS}, key=lambda m: m.__name__)
pytestmark = pytest.mark.parametrize("model", MODELS, ids=[m.__name__ for m in MODELS])


def refused_or_parsed(model: type[Message], body: bytes) -> Message | MalformedMessage:
    """The one allowed outcome of any bytes: a message, or MalformedMessage naming the contract."""
    try:
        return parse(model, body)
    except MalformedMessage as exc:
        assert str(exc).startswith(f"malformed {model.__name__}: ")
        return exc


def test_every_contract_has_valid_messages_that_round_trip(model):
    doc = valid_example(model)
    msg = parse(model, json.dumps(doc).encode())
    assert parse(model, msg.to_bytes()) == msg


def test_generated_messages_round_trip_or_are_refused(model):
    @FUZZ
    @given(from_schema(model.model_json_schema(by_alias=True)))
    def check(doc: Any) -> None:
        got = refused_or_parsed(model, json.dumps(doc).encode())
        if isinstance(got, Message):  # (a model validator may refuse what the schema allows)
            assert parse(model, got.to_bytes()) == got

    check()


def test_random_bytes_are_refused(model):
    @FUZZ
    @given(st.binary(max_size=512))
    def check(body: bytes) -> None:
        refused_or_parsed(model, body)

    check()


def test_mutated_messages_are_refused_naming_the_field(model):
    valid = valid_example(model)

    @FUZZ
    @given(st.sampled_from(sorted(valid) or ["none"]), json_values, st.sampled_from(["replace", "drop", "add"]))
    def check(key: str, value: Any, how: str) -> None:
        doc = dict(valid)
        if how == "replace":
            doc[key] = value
        elif how == "drop":
            doc.pop(key, None)
        else:
            key = "zz" + key
            doc[key] = value
        got = refused_or_parsed(model, json.dumps(doc).encode())
        if isinstance(got, MalformedMessage) and how != "drop":
            assert key in str(got)

    check()


def test_hostile_corpus_is_refused_naming_the_field(model):
    for case in hostile_bodies(model, valid_example(model)):
        got = refused_or_parsed(model, case.body)
        assert isinstance(got, MalformedMessage), case.name
        assert case.names in str(got), (case.name, str(got)[:300])


async def test_typed_never_calls_the_handler_with_a_malformed_message(model):
    called: list[Message] = []

    async def handler(msg: Message) -> None:
        called.append(msg)

    async def publish(body: bytes, subject: str, headers: dict[str, str]) -> None:
        raise AssertionError("nothing is published for a malformed message")

    work = typed(model, handler, publish)
    for case in hostile_bodies(model, valid_example(model)):
        with pytest.raises(MalformedMessage):
            await work(case.body)
    assert called == []
