"""Markdown building blocks for the generated reference pages: escaped text, tables, anchors and
JSON Schema types in words.

Text from the code (help strings, descriptions, summaries) is prose with `code spans`; only the
prose between them is escaped, so that a `<hostname>` in prose stays visible and a code span
stays literal. Anchors are computed as Python-Markdown's toc extension computes heading ids, so
a link and its heading cannot disagree.
"""
from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["anchor", "cell", "code", "link", "prose", "schema_type", "table"]

_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
_ESCAPES = {"\\": "\\\\", "<": "&lt;", ">": "&gt;", "*": "\\*", "_": "\\_", "[": "\\[", "]": "\\]"}


def _escape(text: str, in_table: bool = False) -> str:
    out = "".join(_ESCAPES.get(ch, ch) for ch in text)
    return out.replace("|", "\\|") if in_table else out


def prose(text: str, in_table: bool = False) -> str:
    """`text` as markdown prose: one paragraph per blank-line-separated block, each block's lines
    joined (help strings and docstrings are hard-wrapped), markup characters escaped outside code
    spans (and `|` too in a table cell; inside a code span the table extension leaves it alone)."""
    blocks = [" ".join(line.strip() for line in block.splitlines()) for block in re.split(r"\n\s*\n", text.strip())]
    out = []
    for block in blocks:
        parts, last = [], 0
        for m in _CODE_SPAN.finditer(block):
            parts += [_escape(block[last:m.start()], in_table), m.group(0)]
            last = m.end()
        parts.append(_escape(block[last:], in_table))
        out.append("".join(parts))
    return "\n\n".join(b for b in out if b)


def cell(text: object) -> str:
    """One table cell: prose on one line; "-" when empty."""
    return prose(str(text), in_table=True).replace("\n\n", " ") or "-"


def code(text: object) -> str:
    """`text` as a code span, with enough backticks around it."""
    value = str(text)
    ticks = "`" * (max((len(m) for m in re.findall(r"`+", value)), default=0) + 1)
    pad = " " if value.startswith("`") or value.endswith("`") else ""
    return f"{ticks}{pad}{value}{pad}{ticks}"


def anchor(heading: str) -> str:
    """The id Python-Markdown's toc extension gives a heading (its `slugify`), code spans counted
    as their text."""
    value = unicodedata.normalize("NFKD", heading.replace("`", "")).encode("ascii", "ignore").decode("ascii")
    value = re.sub(r"[^\w\s-]", "", value).strip().lower()
    return re.sub(r"[-\s]+", "-", value)


def link(label: str, heading: str) -> str:
    return f"[{label}](#{anchor(heading)})"


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A markdown table; cells are taken as they are (pass them through `cell` or `code`)."""
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(r.replace("\n", " ") for r in row) + " |" for row in rows]
    return "\n".join(lines)


def schema_type(schema: dict[str, Any], ref_link: Any = None) -> str:
    """A JSON Schema type in words, as markdown. `ref_link(name)` gives the markdown for a `$ref`
    to a named schema (default: the name in code)."""
    if "$ref" in schema:
        name = str(schema["$ref"]).rsplit("/", 1)[-1]
        return ref_link(name) if ref_link else code(name)
    for key, sep in (("anyOf", " or "), ("oneOf", " or "), ("allOf", " and ")):
        if key in schema:
            parts = [s for s in schema[key] if s != {"type": "null"}]
            words = sep.join(schema_type(s, ref_link) for s in parts)
            return words + (" or null" if len(parts) < len(schema[key]) else "")
    if "const" in schema:
        return code(schema["const"])
    if "enum" in schema:
        return "one of " + ", ".join(code(v) for v in schema["enum"])
    kind = schema.get("type")
    if kind == "array":
        return "list of " + schema_type(schema.get("items") or {}, ref_link)
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return "map of " + schema_type(schema["additionalProperties"], ref_link)
    if isinstance(kind, list):
        return " or ".join(str(k) for k in kind)
    words = str(kind or "any")
    if "format" in schema:
        words += f" ({schema['format']})"
    bounds = [f"≥ {schema['minimum']}" if "minimum" in schema else "",
              f"> {schema['exclusiveMinimum']}" if "exclusiveMinimum" in schema else "",
              f"≤ {schema['maximum']}" if "maximum" in schema else "",
              f"< {schema['exclusiveMaximum']}" if "exclusiveMaximum" in schema else ""]
    if any(bounds):
        words += " (" + ", ".join(_escape(b) for b in bounds if b) + ")"
    return words
