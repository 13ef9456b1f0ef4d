"""docs/reference/events.md: the event catalogue, from the code that writes docs/asyncapi.yaml.

The channels (subject, kind, who sends, who receives, replies) are `bke.contracts.subjects.CHANNELS`;
the payloads are the schemas of `bke.contracts.asyncapi.build_asyncapi`, the same objects the
AsyncAPI document and every service's `/asyncapi` page hold.
"""
from __future__ import annotations

import json
from typing import Any

from bke.contracts.asyncapi import build_asyncapi
from bke.contracts.subjects import CHANNELS, Channel
from .markdown import anchor, cell, code, prose, schema_type, table

__all__ = ["render_events_page"]

_INTRO = """\
# Events

Every subject on the bus, who sends it, who receives it, and its payload's fields. Generated from
`bke.contracts` (`python -m bke_cli.docs_reference`), the code that also writes
[asyncapi.yaml](../asyncapi.yaml), the AsyncAPI 3.0 document; every running service serves the
same catalogue at `/asyncapi`.

Subjects carry a version (`bke.v1.…`); `{cluster}`, `{node}` and `{service}` stand for one token.
Commands are imperative (do this), events past tense (this happened); requests are core NATS
request/reply (not stored) and list their replies. Payloads are JSON with camelCase field names;
a field that is not listed is refused.
"""


def _who(names: tuple[str, ...]) -> str:
    return ", ".join(code(n) for n in names) if names else "no BKE component (operators and tools)"


def _refs(node: Any, found: set[str]) -> None:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            found.add(ref.rsplit("/", 1)[-1])
        for value in node.values():
            _refs(value, found)
    elif isinstance(node, list):
        for item in node:
            _refs(item, found)


def _default(prop: dict[str, Any]) -> str:
    return code(json.dumps(prop["default"])) if "default" in prop else "-"


class _Catalogue:
    """Where each schema is described: under its channel (a channel's message) or under Payload
    types (everything a payload refers to, and replies)."""

    def __init__(self, schemas: dict[str, Any]):
        self.schemas = schemas
        primary = {ch.model.__name__ for ch in CHANNELS}
        referenced: set[str] = set()
        _refs(schemas, referenced)
        replies = {m.__name__ for ch in CHANNELS for m in ch.replies}
        self.types = [name for name in schemas if name not in primary or name in referenced or name in replies]
        self.home = {ch.model.__name__: ch.subject for ch in reversed(CHANNELS)}

    def link(self, name: str) -> str:
        heading = name if name in self.types else code(self.home[name])
        return f"[{name}](#{anchor(heading)})"

    def fields(self, schema: dict[str, Any]) -> str:
        props: dict[str, Any] = schema.get("properties") or {}
        if not props:
            return "Type: " + schema_type(schema, self.link) + "\n"
        required = set(schema.get("required") or ())
        described = any(p.get("description") for p in props.values())
        rows = [[code(name), schema_type(p, self.link), "yes" if name in required else "", _default(p),
                 *([cell(p.get("description", ""))] if described else [])] for name, p in props.items()]
        header = ["field", "type", "required", "default", *(["description"] if described else [])]
        return table(header, rows) + "\n"


def _channel(ch: Channel, cat: _Catalogue) -> str:
    name = ch.model.__name__
    schema = cat.schemas[name]
    lines = [f"### {code(ch.subject)}", "", prose(ch.summary), "",
             f"- Kind: {ch.kind}", f"- Sent by: {_who(ch.senders)}", f"- Received by: {_who(ch.receivers)}",
             f"- Message: {cat.link(name) if name in cat.types else code(name)}"]
    if ch.replies:
        lines.append("- Replies: " + ", ".join(cat.link(m.__name__) for m in ch.replies))
    lines.append("")
    if schema.get("description"):
        lines += [prose(schema["description"]), ""]
    lines.append(cat.fields(schema))
    return "\n".join(lines)


def render_events_page() -> str:
    schemas: dict[str, Any] = build_asyncapi()["components"]["schemas"]
    cat = _Catalogue(schemas)
    overview = [[f"[{code(ch.subject)}](#{anchor(code(ch.subject))})", ch.kind, code(ch.model.__name__),
                 ", ".join(ch.senders) or "-", ", ".join(ch.receivers) or "-"] for ch in CHANNELS]
    parts = [_INTRO, "## Overview\n", table(["subject", "kind", "message", "sent by", "received by"], overview) + "\n",
             "## Channels\n"]
    parts += [_channel(ch, cat) for ch in CHANNELS]
    parts.append("## Payload types\n\nThe types that messages refer to, and the replies to requests.\n")
    for name in cat.types:
        schema = schemas[name]
        parts.append(f"### {name}\n")
        if schema.get("description"):
            parts.append(prose(schema["description"]) + "\n")
        parts.append(cat.fields(schema))
    return "\n".join(parts)
