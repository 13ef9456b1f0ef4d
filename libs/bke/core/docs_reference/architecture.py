"""The generated blocks of docs/concepts/architecture.md: who sends and hears each subject, what
each part writes in Redis, runs and consumes, and the Redis key families.

Sources, all code that is enforced or tested elsewhere:

    subjects     bke.contracts.subjects.CHANNELS (senders, receivers); for the dashboards, what
                 their bus identity is allowed (bke.adapters.auth.permissions)
    Redis        each service's ACL user's write patterns (bke.adapters.runtime.redis_acl.USERS,
                 which Redis enforces); a record is the part's when its user may write the
                 record's header (bke.core.state.schema.RECORDS)
    operations   the operation slot's kinds (bke.adapters.state.operation_slot.KINDS): a part
                 runs an operation when it owns the record that holds the operation's state
    consumers    each service's durable consumers (bke.adapters.auth.jetstream_grants)
    key families the modules of bke.adapters.state.keys, their docstrings and their key builders

The adapters' tables come in as `Part` values (bke_cli.docs_reference gathers them): the core may
not import the adapters, and a renderer of plain values is tested without them.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase

from bke.contracts.subjects import CHANNELS, Channel
from bke.core.state.schema import RECORDS, RecordKind
from .markdown import code, prose, table

__all__ = ["HELD_IN", "KeyFamily", "Part", "render_key_families_block", "render_records_block",
           "render_subjects_block"]

# The two operation kinds without a record of their own name: the record that holds their state.
# tests/unit/docs/test_docs_architecture.py checks both sides against the slot's kinds and RECORDS.
HELD_IN: dict[str, str] = {"delete": "reset", "apply": "upgrade"}
_CLUSTER_GLOB = re.compile(r"^bke:\*:")


@dataclass(frozen=True)
class Part:
    """One program of BKE as the adapters' tables describe it."""

    title: str  # its column and heading: planner, ..., agent, CLI, dashboards
    identity: str  # its bus identity
    summary: str = ""  # what it is, where its name does not say it
    component: str = ""  # its name in CHANNELS senders and receivers; "" for a part described by its permissions
    may_send: tuple[str, ...] = ()  # with no component: the channel subjects its identity may publish
    may_hear: tuple[str, ...] = ()  # ... and subscribe
    redis_user: str = ""
    redis_why: str = ""
    writes: tuple[str, ...] = ()  # the Redis key patterns its user may write (fnmatch globs)
    consumers: tuple[tuple[str, str, str], ...] = ()  # its durable consumers: (stream, durable, filter subject)


def _sends(part: Part, ch: Channel) -> bool:
    return part.component in ch.senders if part.component else ch.subject in part.may_send


def _hears(part: Part, ch: Channel) -> bool:
    return part.component in ch.receivers if part.component else ch.subject in part.may_hear


def _cell(part: Part, ch: Channel) -> str:
    """What the part does on the channel; "may ..." for a part whose permissions are all we know."""
    verbs = [v for v, on in (("send", _sends(part, ch)), ("hear", _hears(part, ch))) if on]
    if not part.component:
        return "may " + " and ".join(verbs) if verbs else ""
    return ", ".join(v + "s" for v in verbs)


def render_subjects_block(parts: Sequence[Part]) -> str:
    """One row per channel of CHANNELS, one column per part."""
    rows = [[code(ch.subject), ch.kind, *(_cell(p, ch) for p in parts)] for ch in CHANNELS]
    return table(["subject", "kind", *(p.title for p in parts)], rows) + "\n"


def _key(pattern: str) -> str:
    """A Redis glob in the notation of bke.adapters.state.keys: `bke:*:plan` -> `bke:<c>:plan`."""
    return _CLUSTER_GLOB.sub("bke:<c>:", pattern)


def _header(record: RecordKind) -> str:
    return f"bke:<c>:{record.slot.key}"


def _owners(record: RecordKind, parts: Sequence[Part]) -> list[str]:
    """The parts whose user may write the record's header; not the admin user, who may write anything."""
    return [p.title for p in parts if "*" not in p.writes and any(fnmatchcase(_header(record), w) for w in p.writes)]


def _runners(parts: Sequence[Part], kinds: Sequence[str]) -> dict[str, list[str]]:
    """Part title -> the operation kinds it runs. ValueError for a kind whose record is unknown
    or may be written by more or fewer than one part."""
    by_name = {r.name: r for r in RECORDS}
    out: dict[str, list[str]] = {p.title: [] for p in parts}
    for kind in kinds:
        record = by_name.get(HELD_IN.get(kind, kind))
        owners = _owners(record, parts) if record else []
        if len(owners) != 1:
            raise ValueError(f"operation {kind}: its record must have one writer, found {owners or 'none'}")
        out[owners[0]].append(kind)
    return out


def _only_writer_of(part: Part, parts: Sequence[Part], global_keys: Sequence[str]) -> list[str]:
    others = [w for p in parts if p is not part and "*" not in p.writes for w in p.writes]
    return [k for k in global_keys if not any(fnmatchcase(k, w) for w in others)]


def _redis_lines(part: Part, parts: Sequence[Part], global_keys: Sequence[str]) -> list[str]:
    if "*" in part.writes:
        only = _only_writer_of(part, parts, global_keys)
        return ["- May write every key (the admin user); only the admin user writes "
                + ", ".join(code(k) for k in only) + "."]
    records = []
    for record in RECORDS:
        owners = _owners(record, parts)
        if part.title in owners:
            shared = [o for o in owners if o != part.title]
            records.append(code(record.name) + (f" (shared with {', '.join(shared)})" if shared else ""))
    lines = ["- Owns the records: " + (", ".join(records) or "none") + "."]
    if part.writes:
        lines.append("- May write: " + ", ".join(code(_key(w)) for w in part.writes) + ".")
    return lines


def _consumer_line(part: Part) -> str:
    if not part.consumers:
        return "- Durable consumers: none."
    by_stream: dict[str, list[str]] = {}
    for stream, durable, subject in part.consumers:
        by_stream.setdefault(stream, []).append(f"{code(durable)} ({code(subject)})")
    return "- Durable consumers: " + "; ".join(f"on {code(s)}: " + ", ".join(c) for s, c in by_stream.items()) + "."


def render_records_block(parts: Sequence[Part], kinds: Sequence[str], global_keys: Sequence[str]) -> str:
    """One section per part: identity, Redis user, records and keys it writes, operations it
    runs, durable consumers. `kinds`: the operation slot's kinds; `global_keys`: every key that
    names no cluster (for a part that may write every key: which of them only it writes)."""
    runners = _runners(parts, kinds)
    out = []
    for part in parts:
        user = f"Redis user {code(part.redis_user)}" + (f" ({part.redis_why})" if part.redis_why else "")
        lines = [f"### {part.title}", "", *([part.summary[:1].upper() + part.summary[1:] + ".", ""] if part.summary else []),
                 f"- Bus identity {code(part.identity)}; {user if part.redis_user else 'no Redis user'}.",
                 "- Runs the operations: " + (", ".join(code(k) for k in runners[part.title]) or "none") + ".",
                 *_redis_lines(part, parts, global_keys), _consumer_line(part), ""]
        out.append("\n".join(lines))
    return "\n".join(out)


@dataclass(frozen=True)
class KeyFamily:
    """One module of bke.adapters.state.keys: its writer and readers in a sentence (its
    docstring's first paragraph) and every key its builders name."""
    name: str
    module: str
    summary: str
    keys: tuple[str, ...]


def render_key_families_block(families: Sequence[KeyFamily]) -> str:
    """One item per family: its name and module, who writes it, its keys."""
    return "\n".join(f"- {code(f.name)} ({code(f.module)}): {prose(f.summary)} Keys: "
                     + ", ".join(code(k) for k in f.keys) + "." for f in families) + "\n"
