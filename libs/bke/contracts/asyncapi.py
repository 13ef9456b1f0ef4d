"""Generate the AsyncAPI 3.0 document from `CHANNELS`: the bus contract, from the code.

`python -m bke.contracts.asyncapi > docs/asyncapi.yaml` regenerates the committed file;
a contract test fails when the two differ.
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


def build_asyncapi(version: str = "1.0.0") -> dict[str, Any]:
    channels: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    messages: dict[str, Any] = {}
    schemas: dict[str, Any] = {}

    def add_message(model: type[Message]) -> str:
        name = model.__name__
        schema = model.model_json_schema(by_alias=True, ref_template="#/components/schemas/{model}")
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
