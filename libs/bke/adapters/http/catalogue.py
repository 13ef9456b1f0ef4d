"""The event catalogue as a page every service serves: `/asyncapi` (readable: channels, their
messages, who sends and receives them, every payload's fields) and `/asyncapi.yaml` (the
document itself). Both are generated from `bke.contracts.asyncapi` in the running process, so
they describe the code that answers, not a file that may lag it; nothing is fetched from
anywhere (no CDN, no script).

`catalogue_page(doc)` is pure over the AsyncAPI document (any JSON schema the contracts produce:
`$ref`, `anyOf`/`oneOf`, arrays, maps, enums, constants); every value goes through
`bke.adapters.http.page`, which escapes it.
"""
from __future__ import annotations

import functools
import re
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from .page import Markup, layout, link, table, text

__all__ = ["catalogue_page", "catalogue_routes", "schema_type"]

_REF = "#/components/schemas/"


def _anchor(name: str) -> str:
    return "schema-" + re.sub(r"[^A-Za-z0-9_-]", "_", name)


def schema_type(schema: dict[str, Any]) -> Markup:
    """A field's type in words, with a link to a named schema."""
    if "$ref" in schema:
        name = str(schema["$ref"]).removeprefix(_REF)
        return link("#" + _anchor(name), name)
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            sep = " & " if key == "allOf" else " | "
            return Markup(sep.join(schema_type(s) for s in schema[key]))
    if "const" in schema:
        return text(repr(schema["const"]))
    if "enum" in schema:
        return Markup("one of " + ", ".join(text(repr(v)) for v in schema["enum"]))
    kind = schema.get("type")
    if kind == "array":
        return Markup("list of " + schema_type(schema.get("items") or {}))
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return Markup("map of " + schema_type(schema["additionalProperties"]))
    if isinstance(kind, list):
        return text(" | ".join(str(k) for k in kind))
    return text(kind or "any")


def _fields(schema: dict[str, Any]) -> Markup:
    props: dict[str, Any] = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    if not props:
        return Markup(f"<p>{text(schema_type(schema))}</p>")
    # pydantic's `title` only repeats the field's name: the description and default say more
    rows = [[Markup(f"<code>{text(name)}</code>"), schema_type(p), "yes" if name in required else "",
             "" if "default" not in p else repr(p["default"]), p.get("description", "")] for name, p in props.items()]
    return table(["field", "type", "required", "default", "description"], rows)


def catalogue_page(doc: dict[str, Any], service: str) -> str:
    channels: dict[str, Any] = doc.get("channels") or {}
    operations: dict[str, Any] = doc.get("operations") or {}
    schemas: dict[str, Any] = (doc.get("components") or {}).get("schemas") or {}
    who: dict[str, dict[str, list[str]]] = {}
    for op_id, op in operations.items():
        cid = str((op.get("channel") or {}).get("$ref", "")).removeprefix("#/channels/")
        svc = op_id.split(f"_{op.get('action')}s_", 1)[0]
        who.setdefault(cid, {}).setdefault(str(op.get("action")), []).append(svc)
    rows = []
    for cid, ch in channels.items():
        msgs = [link("#" + _anchor(m), m) for m in (ch.get("messages") or {})]
        rows.append([Markup(f"<code>{text(ch.get('address') or '(reply inbox)')}</code>"), ch.get("description", ""),
                     Markup(", ".join(msgs)), ", ".join(who.get(cid, {}).get("send", [])),
                     ", ".join(who.get(cid, {}).get("receive", []))])
    info = doc.get("info") or {}
    parts: list[Any] = [
        Markup(f"<p>{text(info.get('description', ''))} AsyncAPI {text(doc.get('asyncapi', ''))}, version "
               f"{text(info.get('version', ''))}; generated from the running code. The document: "
               f"{link('/asyncapi.yaml', '/asyncapi.yaml')}.</p>"),
        Markup("<h2>Channels</h2>"),
        table(["subject", "what", "messages", "sent by", "received by"], rows, id="channels"),
        Markup("<h2>Messages and payloads</h2>"),
    ]
    for name, schema in schemas.items():
        parts.append(Markup(f'<h3 id="{_anchor(name)}">{text(name)}</h3>'))
        if schema.get("description"):
            parts.append(Markup(f"<p>{text(schema['description'])}</p>"))
        parts.append(_fields(schema))
    return layout(service, "Event catalogue", *parts, nav=[("/asyncapi", "catalogue")])


@functools.cache
def _document() -> tuple[dict[str, Any], str]:
    # built on first use, once per process: the contracts cannot change while it runs
    from bke.contracts.asyncapi import build_asyncapi, render_asyncapi

    return build_asyncapi(), render_asyncapi()


def catalogue_routes(service: str) -> list[Route]:
    async def page(_: Request) -> Response:
        return HTMLResponse(catalogue_page(_document()[0], service))

    async def yaml_text(_: Request) -> Response:
        return Response(_document()[1], media_type="application/yaml; charset=utf-8")

    return [Route("/asyncapi", page, methods=["GET"]), Route("/asyncapi.yaml", yaml_text, methods=["GET"])]
