"""Generate the AsyncAPI 3.0 document from `CHANNELS`: the bus contract, from the code.

`python -m bke.contracts.asyncapi > docs/asyncapi.yaml` regenerates the committed file;
a contract test fails when the two differ, and another parses it with the official AsyncAPI
parser (tools/asyncapi-check, tests/contract/test_asyncapi_parser.py).

Pydantic writes JSON Schema with OpenAPI's discriminator object (`propertyName` + `mapping`) on
a tagged union. An AsyncAPI Schema Object's `discriminator` is a string whose value must be the
*name* of a schema, which our tags (`write_file`, not `WriteFile`) are not, so `_as_asyncapi_schema`
says the same thing in plain JSON Schema instead: the union's members each fix the tag with
`const`, and the union requires the tag, so exactly one member matches, as in pydantic.
"""
from __future__ import annotations

import re
import sys
from typing import Any

import yaml

from .base import Message
from .subjects import CHANNELS

__all__ = ["build_asyncapi", "render_asyncapi"]


def _channel_id(subject: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", subject).strip("_")


def _as_asyncapi_schema(node: Any) -> Any:
    """A copy of a pydantic JSON schema with each OpenAPI discriminator object replaced by a
    required tag property (see the module docstring)."""
    if isinstance(node, list):
        return [_as_asyncapi_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _as_asyncapi_schema(value) for key, value in node.items() if key != "discriminator"}
    found = node.get("discriminator")
    if isinstance(found, dict):
        tag = found["propertyName"]
        out["required"] = [*out.get("required", []), *([] if tag in out.get("required", []) else [tag])]
        out.setdefault("description", f"One of these schemas, told apart by its `{tag}` field (each fixes it with `const`).")
    elif found is not None:
        out["discriminator"] = found
    return out


def build_asyncapi(version: str = "1.0.0") -> dict[str, Any]:
    channels: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    messages: dict[str, Any] = {}
    schemas: dict[str, Any] = {}

    def add_message(model: type[Message]) -> str:
        name = model.__name__
        schema = _as_asyncapi_schema(model.model_json_schema(by_alias=True, ref_template="#/components/schemas/{model}"))
        for sub_name, sub in schema.pop("$defs", {}).items():
            schemas[sub_name] = sub
        schemas[name] = schema
        messages[name] = {"name": name, "contentType": "application/json", "payload": {"$ref": f"#/components/schemas/{name}"}}
        return name

    for ch in CHANNELS:
        name = add_message(ch.model)
        cid = _channel_id(ch.subject)
        params = re.findall(r"\{(\w+)\}", ch.subject)
        channels[cid] = {
            "address": ch.subject,
            "description": f"{ch.kind}: {ch.summary}",
            "messages": {name: {"$ref": f"#/components/messages/{name}"}},
            **({"parameters": {p: {"description": p} for p in params}} if params else {}),
        }
        reply: dict[str, Any] = {}
        if ch.replies:
            # the reply goes to the requester's inbox: a channel with no fixed address
            names = [add_message(m) for m in ch.replies]
            channels[f"{cid}_reply"] = {
                "address": None,
                "description": f"The reply to {ch.subject}.",
                "messages": {n: {"$ref": f"#/components/messages/{n}"} for n in names},
            }
            reply = {"reply": {"channel": {"$ref": f"#/channels/{cid}_reply"}}}
        for svc in ch.senders:
            operations[f"{svc}_sends_{cid}"] = {"action": "send", "channel": {"$ref": f"#/channels/{cid}"}, **reply}
        for svc in ch.receivers:
            operations[f"{svc}_receives_{cid}"] = {"action": "receive", "channel": {"$ref": f"#/channels/{cid}"}, **reply}
    return {
        "asyncapi": "3.0.0",
        "info": {"title": "BKE bus", "version": version, "description": "Subjects and messages between BKE services and node agents."},
        "defaultContentType": "application/json",
        "channels": channels,
        "operations": operations,
        "components": {"messages": messages, "schemas": dict(sorted(schemas.items()))},
    }


def render_asyncapi() -> str:
    return yaml.safe_dump(build_asyncapi(), sort_keys=False, width=120)


if __name__ == "__main__":
    sys.stdout.write(render_asyncapi())
