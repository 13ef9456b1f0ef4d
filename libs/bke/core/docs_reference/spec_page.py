"""docs/reference/spec.md: every field of the BKECluster and BKENode documents, generated from the
JSON Schema that `bke spec schema` prints (bke.core.spec.json_schema), so the table, the schema and the
loader's models cannot disagree; and how to point an editor at that schema."""
from __future__ import annotations

import json
from typing import Any

from bke.core.spec.json_schema import SCHEMA_FILE, spec_schema
from bke.core.spec.models import API_VERSION
from .markdown import cell, code, schema_type, table

__all__ = ["render_spec_page", "spec_rows"]

_SCHEMA_NAME = SCHEMA_FILE.rsplit("/", 1)[-1]

_INTRO = f"""\
# Spec fields

A spec is one YAML file holding a stream of documents: one `BKECluster` and one `BKENode`
per node, separated by `---`, each with `apiVersion: {API_VERSION}`. The
examples in the repository (`examples/seed-3m1w.yaml`, `examples/split-etcd.yaml`) are
complete specs; [The cluster spec](../concepts/spec.md) explains the ideas behind the fields.

This page is generated from the spec models (`python -m bke_cli.docs_reference`). A field that
is not listed is refused ("unknown field", with its path); `bke plan SPEC` also runs every rule
that spans fields (versions, addresses, roles, flags) and reports all errors at once.

## Editor support

`bke spec schema` prints a JSON Schema (draft 2020-12) of one spec document, generated from
the same models; [{_SCHEMA_NAME}]({_SCHEMA_NAME}) is its copy in this
repository (`{SCHEMA_FILE}`). An editor that knows it completes field names,
shows the descriptions below and marks a misspelled field at any level, an unknown `kind` or
`role`, and a value of the wrong type, in every document of the file. The schema uses only
keywords that draft-07 knows as well (`$ref`, `if`/`then`, `const`, `enum`,
`additionalProperties`), so a language server that implements draft-07 and older (the YAML
language server does) checks the same.

With the YAML language server (VS Code's YAML extension, Neovim, Helix, Emacs' lsp-mode), put a
modeline at the top of a spec file; a relative path is read from the file's folder:

```yaml
# yaml-language-server: $schema=../docs/reference/{_SCHEMA_NAME}
apiVersion: {API_VERSION}
kind: BKECluster
```

Or map the schema to your spec files once, in VS Code's `settings.json` (workspace or user);
the key is the schema (a path from the workspace root, or a URL), the value the files it
applies to:

```json
{{
  "yaml.schemas": {{
    "./{SCHEMA_FILE}": ["clusters/*.yaml", "examples/*.yaml"]
  }}
}}
```

To keep a schema next to your own specs, write it from the `bke` you deploy with:
`bke spec schema > bke-spec.schema.json`.

The schema checks each document on its own, and is a little stricter than the loader: it wants
JSON types (`port: 22`, not `port: "22"`) and the camelCase field names listed here. Rules that
span fields or documents (unique hostnames and addresses, an odd number of etcd members, a
supported version, flags the denylist refuses) are `bke plan`'s.
"""


def _default(prop: dict[str, Any]) -> str:
    if "default" not in prop:
        return "-"
    value = prop["default"]
    if isinstance(value, dict) and value:
        return "its fields' defaults"
    return code(json.dumps(value) if not isinstance(value, str) else value)


def _target(prop: dict[str, Any], defs: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The object a property holds (suffix "" or "[]" for a list of objects), if any."""
    if "$ref" in prop:
        return "", defs[str(prop["$ref"]).rsplit("/", 1)[-1]]
    for option in prop.get("anyOf", ()):
        if "$ref" in option:
            return "", defs[str(option["$ref"]).rsplit("/", 1)[-1]]
    items = prop.get("items")
    if prop.get("type") == "array" and isinstance(items, dict) and "$ref" in items:
        return "[]", defs[str(items["$ref"]).rsplit("/", 1)[-1]]
    return None


def spec_rows(model: dict[str, Any], defs: dict[str, Any], prefix: str = "") -> list[list[str]]:
    """One row per field, depth first, in the models' order: path, type, default, required,
    description."""
    rows: list[list[str]] = []
    required = set(model.get("required", ()))
    for name, prop in model.get("properties", {}).items():
        path = f"{prefix}.{name}" if prefix else name
        kind = schema_type(prop, ref_link=lambda _name: "object")
        rows.append([code(path), kind, _default(prop), "yes" if name in required else "", cell(prop.get("description", ""))])
        inner = _target(prop, defs)
        if inner is not None:
            rows += spec_rows(inner[1], defs, path + inner[0])
    return rows


def render_spec_page() -> str:
    schema = spec_schema()
    defs = schema["$defs"]
    parts = [_INTRO]
    for kind, what in (("BKECluster", "The cluster: exactly one per spec."),
                       ("BKENode", "One document per node; the documents of a spec may come in any order.")):
        rows = spec_rows(defs[kind], defs)
        parts.append(f"## {kind}\n\n{what}\n\n" + table(["path", "type", "default", "required", "description"], rows) + "\n")
    return "\n".join(parts)
