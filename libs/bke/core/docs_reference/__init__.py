"""The reference pages of the docs site that the libraries alone can generate: each page is a
function of the data tables it describes, so the docs cannot drift from the code.

`PAGES` maps each page's path (from the repository root) to its generator. The CLI's own page
and the one entry that writes or checks every generated file live with the CLI
(`python -m bke_cli.docs_reference [--check]`), which may import both sides.
"""
from __future__ import annotations

from collections.abc import Callable

from bke.core.spec.json_schema import SCHEMA_FILE, render_spec_schema
from .events_page import render_events_page
from .flags_page import render_flags_page
from .spec_page import render_spec_page
from .versions_page import render_versions_page

__all__ = ["PAGES", "render_events_page", "render_flags_page", "render_spec_page", "render_versions_page"]

PAGES: dict[str, Callable[[], str]] = {
    "docs/reference/spec.md": render_spec_page,
    SCHEMA_FILE: render_spec_schema,
    "docs/reference/events.md": render_events_page,
    "docs/reference/versions.md": render_versions_page,
    "docs/reference/flags.md": render_flags_page,
}
