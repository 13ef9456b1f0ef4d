"""The JSON Schema (draft 2020-12) of one spec document, generated from the models.

A spec file is a YAML stream of documents; an editor applies a schema to each of them. So the
schema describes one document, a BKECluster or a BKENode, told apart by `kind`
(`if`/`then`), each closed as the loader is (`extra="forbid"`: a misspelled field at any level is
an error). `bke spec schema` prints it and docs/reference/bke-spec.schema.json is its committed
copy, which a test keeps equal.

Both know a field only by its documented camelCase name (the loader validates by alias only;
the models' `populate_by_name` serves code that builds them). Where they differ, the schema is
the stricter:
- the loader converts in pydantic's lax mode (`port: "22"`, `enabled: "yes"`); the schema wants
  the JSON types;
- `role` values are refused by `validate_spec`, not by the loader; the schema lists them (the
  field's `json_schema_extra`), because every command that reads a spec runs both.
"""
from __future__ import annotations

import json
from typing import Any

from pydantic.json_schema import models_json_schema

from .models import API_VERSION, BKECluster, BKENode

__all__ = ["SCHEMA_FILE", "render_spec_schema", "spec_schema"]

SCHEMA_FILE = "docs/reference/bke-spec.schema.json"
_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def _without_field_titles(node: Any) -> Any:
    """Pydantic titles each property after its Python name ("Extraargs"); an editor would show
    that instead of the description. Model titles (the `$defs`' names) are kept."""
    if isinstance(node, list):
        return [_without_field_titles(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _without_field_titles(value) for key, value in node.items()}
    if isinstance(out.get("properties"), dict):
        out["properties"] = {name: {k: v for k, v in prop.items() if k != "title"}
                             for name, prop in out["properties"].items()}
    return out


def spec_schema() -> dict[str, Any]:
    """One spec document: a BKECluster or a BKENode, each closed to unknown fields."""
    refs, top = models_json_schema([(BKECluster, "validation"), (BKENode, "validation")], by_alias=True)
    branches = []
    for model in (BKECluster, BKENode):
        kind = model.__name__
        branches.append({
            "if": {"properties": {"kind": {"const": kind}}, "required": ["kind"]},
            "then": refs[(model, "validation")],
        })
    return {
        "$schema": _DIALECT,
        "title": "BKE spec document",
        "description": "One document of a BKE spec: the BKECluster or a BKENode. A spec file is a YAML stream of "
                       "one BKECluster and one BKENode per node, separated by `---`.",
        "type": "object",
        "required": ["apiVersion", "kind"],
        "properties": {
            "apiVersion": {"const": API_VERSION},
            "kind": {"enum": [BKECluster.__name__, BKENode.__name__]},
        },
        "allOf": branches,
        "$defs": _without_field_titles(top["$defs"]),
    }


def render_spec_schema() -> str:
    """The schema as the committed file holds it: sorted keys, two-space indent, one final newline."""
    return json.dumps(spec_schema(), indent=2, sort_keys=True) + "\n"
