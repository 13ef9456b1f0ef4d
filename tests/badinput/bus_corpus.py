"""Hostile bus messages for a contract: each a name, the bytes, and the words the refusal must
contain (the field it names). Shared by the unit fuzzers and the integration test that sends
them to running services."""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass

from hypothesis import find, settings

from bke.contracts.base import Message

from .fuzz import from_schema

__all__ = ["Hostile", "OVERSIZED", "hostile_bodies", "valid_example"]

# Under nats-server's default max_payload (1 MiB: server/const.go MAX_PAYLOAD_SIZE), so the server
# delivers it and the service must refuse it; its dead letter would not fit untruncated.
OVERSIZED = 900 * 1024


@dataclass(frozen=True)
class Hostile:
    name: str
    body: bytes
    names: str = ""  # what the error must mention (a field), "" when nothing in particular


@functools.cache
def valid_example(model: type[Message]) -> dict:
    """One document the contract accepts, drawn from its schema (smallest hypothesis finds)."""

    def accepted(doc: dict) -> bool:
        try:
            model.model_validate_json(json.dumps(doc))
        except ValueError:
            return False
        return True

    return find(from_schema(model.model_json_schema(by_alias=True)), accepted, settings=settings(max_examples=2000, database=None))


def hostile_bodies(model: type[Message], valid: dict) -> list[Hostile]:
    out = [
        Hostile("garbage", b"\x00\xff\xfe garbage \x81"),
        Hostile("empty", b""),
        Hostile("null", b"null"),
        Hostile("list", b"[]"),
        Hostile("string", b'"a string"'),
        Hostile("truncated", json.dumps(valid).encode()[:-1]),
        Hostile("deep-nesting", b"[" * 100_000 + b"]" * 100_000),
        Hostile("non-utf8-in-string", json.dumps(valid).encode().replace(b"{", b'{"\xff\xfe": 1, ', 1)),
        Hostile("extra-field", json.dumps({**valid, "zzExtraField": 1}).encode(), "zzExtraField"),
        Hostile("oversized", json.dumps({**valid, "zzPadding": "x" * OVERSIZED}).encode(), "zzPadding"),
    ]
    schema = model.model_json_schema(by_alias=True)
    required = schema.get("required", [])
    if required:
        # (a request with no required field, GetHealth or GetCommandKey, is valid as `{}`: for
        # it the hostile cases are the extra fields, the wrong types and the broken bytes)
        out.append(Hostile("empty-object", b"{}", required[0]))
    for key in [*valid, *(k for k in schema.get("properties", {}) if k not in valid)]:
        # a value of a type no field takes: a nested object of a list (also for an optional
        # field the valid example leaves out, so a request whose fields all default is tested)
        out.append(Hostile(f"wrong-type-{key}", json.dumps({**valid, key: {"x": [[1]]}}).encode(), key))
    for key in required:
        if key in valid:
            out.append(Hostile(f"missing-{key}", json.dumps({k: v for k, v in valid.items() if k != key}).encode(), key))
    return out
