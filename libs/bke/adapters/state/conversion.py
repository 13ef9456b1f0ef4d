"""The converters between stored forms, and the pure core of a conversion (no Redis here).

A record (bke.core.state.schema) is read into a `Record`: member name (under `bke:<cluster>:`) ->
value, as Redis holds it (a string, a hash as a dict, a set as a frozenset). A `Converter` takes
a record of version N to version N+1: `convert` runs the chain from the stored version to the
current one and writes the new version into the header; `writes` says which Redis commands
turn the old record into the new one, so that only what changed is written (stamping the
version of a 10,000-node install writes one hash field, not 10,000 commands).

Every converter must be idempotent (converting its own output changes nothing): a record whose
header is missing (members written before their header, e.g. agents provisioned before the
cluster's plan) has no place to note that it was converted, so it is converted again each time.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Union

from bke.core.errors import PermanentError
from bke.core.state.schema import RECORDS, RecordKind, parse_version

__all__ = ["CONVERTERS", "ConversionError", "Converter", "Record", "Registry", "Value", "Write", "chain", "convert",
           "header_version", "register", "writes"]

Value = Union[str, dict[str, str], frozenset[str]]  # a string, a hash or a set
Record = dict[str, Value]


class ConversionError(PermanentError):
    """No converter from a stored version, or a header this code cannot parse."""


def _unchanged(record: Record) -> Record:
    return record


@dataclass(frozen=True)
class Converter:
    """(kind, from_version) -> from_version + 1. `reads`: the members `fn` reads and may
    rewrite (names or `*` patterns as in the table); the header is always read."""

    kind: str
    from_version: int
    summary: str
    fn: Callable[[Record], Record] = _unchanged
    reads: tuple[str, ...] = ()


Registry = Mapping[tuple[str, int], Converter]


def register(*converters: Converter) -> dict[tuple[str, int], Converter]:
    return {(c.kind, c.from_version): c for c in converters}


# A plan converter keeps plan-meta's `digest`: events and records name the plan by it.
#
# Version 0 -> 1 of each kind that had no version: the form is unchanged; only the header
# gains its version (written by `convert`). Forms written before this table: commit 71dcd21
# (tests/fixtures/state/v0/seed.json).
def _join_gains(field: str, value: object) -> Callable[[Record], Record]:
    """A join converter whose new form only adds `field` with `value` to the record's JSON.
    Idempotent: a value already there stays."""

    def convert(record: Record) -> Record:
        raw = record.get("join")
        if not isinstance(raw, str):
            return record
        doc = json.loads(raw)
        if not isinstance(doc, dict) or field in doc:
            return record
        return {**record, "join": json.dumps({**doc, field: value})}

    return convert


# join 1 -> 2: `etcd_joins` (the etcd-only nodes' starts in their running etcd clusters); a join
# stored before could join workers only, so it has none.
# join 2 -> 3: `agents_since` ("" = the join has not waited for its agents yet; its deadline then
# starts at the next pass).
_join_etcd_joins = _join_gains("etcd_joins", [])
_join_agents_since = _join_gains("agents_since", "")
# join 3 -> 4: `held_ports` (the ports of the parts a node joining again runs already); a join
# stored before joined new nodes only, so it has none.
_join_held_ports = _join_gains("held_ports", {})


CONVERTERS: dict[tuple[str, int], Converter] = register(
    *(Converter(k.name, 0, f"{k.slot.key}: add {k.slot.field} (the form is otherwise unchanged)")
      for k in RECORDS if k.first == 0),
    Converter("join", 1, "join: add etcd_joins, empty (a join stored before joined workers only)", _join_etcd_joins),
    Converter("join", 2, "join: add agents_since (when the join began to wait for its agents)", _join_agents_since),
    Converter("join", 3, "join: add held_ports, empty (a join stored before joined new nodes only)", _join_held_ports),
)


def _header(kind: RecordKind, record: Record) -> dict[str, object] | None:
    """The header as a dict (a copy), or None if the record has none."""
    raw = record.get(kind.slot.key)
    if raw is None:
        return None
    if kind.slot.form == "hash":
        if not isinstance(raw, dict):
            raise ConversionError(f"{kind.slot.key}: a hash was expected")
        return dict(raw)
    try:
        doc = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        raise ConversionError(f"{kind.slot.key}: a JSON object was expected")
    return doc


def header_version(kind: RecordKind, record: Record) -> int | None:
    """The record's version; None if it has no header."""
    head = _header(kind, record)
    return None if head is None else parse_version(kind, head.get(kind.slot.field))


def _stamp(kind: RecordKind, record: Record, version: int) -> Record:
    head = _header(kind, record)
    if head is None:
        return record
    out = dict(record)
    if kind.slot.form == "hash":
        out[kind.slot.key] = {**{k: str(v) for k, v in head.items()}, kind.slot.field: str(version)}
    else:
        # JSON headers are written by json.dumps with sort_keys (render meta) or in field order
        # (rotation); the version field is added at the end and readers ignore the order.
        head[kind.slot.field] = version
        out[kind.slot.key] = json.dumps(head)
    return out


def chain(kind: RecordKind, version: int, registry: Registry) -> tuple[Converter, ...]:
    """The converters from `version` to the current one, in order (ConversionError if one is missing)."""
    steps = []
    for v in range(version, kind.current):
        step = registry.get((kind.name, v))
        if step is None:
            raise ConversionError(f"{kind.name}: no conversion from version {v} to {v + 1} in this BKE")
        steps.append(step)
    return tuple(steps)


def convert(kind: RecordKind, record: Record, version: int, registry: Registry) -> tuple[Record, tuple[Converter, ...]]:
    """`record` (of `version`) in the current form, and the converters applied."""
    steps = chain(kind, version, registry)
    out = dict(record)
    for step in steps:
        out = step.fn(out)
    if steps:
        out = _stamp(kind, out, kind.current)
    return out, steps


@dataclass(frozen=True)
class Write:
    """One Redis command on a member: op is set, del, hset, hdel, sadd or srem."""

    member: str
    op: str
    args: tuple[object, ...] = ()


def _write_whole(name: str, value: Value) -> list[Write]:
    if isinstance(value, str):
        return [Write(name, "set", (value,))]
    if isinstance(value, dict):
        return [Write(name, "hset", (dict(value),))] if value else []
    return [Write(name, "sadd", tuple(sorted(value)))] if value else []


def writes(old: Record, new: Record) -> list[Write]:
    """The commands that turn `old` into `new`, member by member, writing only what changed."""
    out: list[Write] = []
    for name in sorted(set(old) | set(new)):
        a, b = old.get(name), new.get(name)
        if a == b:
            continue
        if b is None:
            out.append(Write(name, "del"))
        elif a is None or type(a) is not type(b):
            out += ([Write(name, "del")] if a is not None else []) + _write_whole(name, b)
        elif isinstance(b, str):
            out.append(Write(name, "set", (b,)))
        elif isinstance(a, dict) and isinstance(b, dict):
            changed = {f: v for f, v in b.items() if a.get(f) != v}
            gone = sorted(set(a) - set(b))
            out += [Write(name, "hset", (changed,))] if changed else []
            out += [Write(name, "hdel", tuple(gone))] if gone else []
        elif isinstance(a, frozenset) and isinstance(b, frozenset):
            out += [Write(name, "sadd", tuple(sorted(b - a)))] if b - a else []
            out += [Write(name, "srem", tuple(sorted(a - b)))] if a - b else []
    return out
