"""Markdown tables for docs/renderer.md, generated from the renderer's data tables.

docs/renderer.md holds each table between `<!-- BEGIN name -->` and `<!-- END name -->`; a unit
test regenerates them and fails if the document drifted (BKE_UPDATE_GOLDEN=1 rewrites it).
"""
from __future__ import annotations

import functools
import re

from bke.core.flagrules.flag_table import FLAGS
from bke.core.flagrules.gates import GATES
from .args import DENYLIST
from .presets import PRESETS, TIERS
from .templates import TEMPLATE_RANGES

__all__ = ["TABLES", "replace_tables"]


def _row(*cells: str) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def tiers_table() -> str:
    lines = [_row("tier", "from registered nodes", "why"), _row("---", "---:", "---")]
    lines += [_row(t.name, f"{t.min_nodes:,}", t.why) for t in TIERS]
    return "\n".join(lines)


def presets_table() -> str:
    lines = [_row("component", "flag", "value", "from tier", "condition", "source"), _row(*["---"] * 6)]
    for p in PRESETS:
        flag = f"--feature-gates={p.gate}=…" if p.gate else f"--{p.flag}"
        lines.append(_row(p.component, f"`{flag}`", f"`{p.value}`", p.tier, p.needs or "-", p.source))
    return "\n".join(lines)


def gates_table() -> str:
    lines = [_row("component", "kind", "name", "versions", "otherwise", "source"), _row(*["---"] * 6)]
    lines += [_row(g.component, g.kind, f"`{g.name}`", g.range_text, g.instead or "-", g.source) for g in GATES]
    return "\n".join(lines)


def denylist_table() -> str:
    lines = [_row("component", "flag", "refused values", "why"), _row(*["---"] * 4)]
    lines += [_row(r.component, f"`--{r.flag}`", r.refused_text, r.reason) for r in DENYLIST]
    return "\n".join(lines)


def flag_changes_table() -> str:
    """The flag table's rows that change within or just before the supported versions (the
    base lists, present in every supported version, are in bke/core/flagrules/flag_table.py)."""
    lines = [_row("component", "flag", "added", "deprecated", "removed", "instead", "source"), _row(*["---"] * 7)]
    for f in FLAGS:
        if f.since or f.removed or (f.deprecated and not f.deprecated.startswith("<")):
            lines.append(_row(f.component, f"`--{f.name}`", f.since or "-", f.deprecated or "-", f.removed or "-", f.instead or "-", f.source))
    return "\n".join(lines)


def templates_table() -> str:
    lines = [_row("family", "versions", "folder", "why"), _row(*["---"] * 4)]
    for r in TEMPLATE_RANGES:
        until = f", < {r.until[0]}.{r.until[1]}" if r.until else ""
        lines.append(_row(r.family, f">= {r.since[0]}.{r.since[1]}{until}", f"`templates/{r.folder}`", r.why))
    return "\n".join(lines)


TABLES = {
    "tiers": tiers_table,
    "presets": presets_table,
    "gates": gates_table,
    "denylist": denylist_table,
    "templates": templates_table,
    "flag-changes": flag_changes_table,
}


def replace_tables(text: str) -> str:
    """`text` with every generated table replaced by its current content."""
    for name, make in TABLES.items():
        pattern = re.compile(rf"(<!-- BEGIN {name} -->\n)(?:.*?\n)?(<!-- END {name} -->)", re.S)
        if not pattern.search(text):
            raise ValueError(f"docs/renderer.md has no {name} table markers")
        text = pattern.sub(functools.partial(_fill, make()), text)
    return text


def _fill(table: str, markers: re.Match[str]) -> str:
    return markers.group(1) + table + "\n" + markers.group(2)
