"""Plain, fast, offline pages: one stylesheet inline, no script from anywhere else, every value
escaped here (callers pass data, never markup, except through `Markup` made by these helpers).

A dashboard page is `layout(service, title, body...)` with `table(...)`, `link(...)` and
`text(...)` pieces; a page that updates live polls its own JSON route with the small inline
script `poll_script` (no vendored library is needed for that).
"""
from __future__ import annotations

import html
import json
from typing import Any, Iterable, Sequence

__all__ = ["Markup", "layout", "link", "table", "text", "poll_script"]

_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.3em}h2{font-size:1.1em;margin-top:1.5em}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}
th{background:#f3f3f3}.ok{background:#dfd}.bad{background:#fdd}.run{background:#ffd}.dim{color:#888}
nav a{margin-right:1em}code{font-size:.95em}
"""


class Markup(str):
    """Text that is already safe HTML (made by the helpers below)."""


def text(value: Any) -> Markup:
    return value if isinstance(value, Markup) else Markup(html.escape("" if value is None else str(value)))


def link(href: str, label: Any) -> Markup:
    return Markup(f'<a href="{html.escape(href, quote=True)}">{text(label)}</a>')


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], *, row_class: Sequence[str] | None = None,
          id: str = "") -> Markup:
    """Cells are escaped unless they are `Markup`; `row_class[i]` (ok, bad, run, dim) colours row i."""
    out = [f'<table{f" id={html.escape(id, quote=True)!r}" if id else ""}><tr>']
    out += [f"<th>{text(h)}</th>" for h in headers]
    out.append("</tr>")
    for i, row in enumerate(rows):
        cls = row_class[i] if row_class and i < len(row_class) and row_class[i] else ""
        out.append(f'<tr class="{html.escape(cls, quote=True)}">' if cls else "<tr>")
        out += [f"<td>{text(c)}</td>" for c in row]
        out.append("</tr>")
    out.append("</table>")
    return Markup("".join(out))


def layout(service: str, title: str, *body: Any, nav: Sequence[tuple[str, str]] = ()) -> str:
    links = " ".join(link(h, label) for h, label in [("/", "home"), *nav, ("/metrics", "metrics"), ("/readyz", "ready")])
    parts = "".join(text(b) for b in body)
    return (f'<!doctype html><html><head><meta charset="utf-8"><title>{text(title)} - bke-{text(service)}</title>'
            f"<style>{_STYLE}</style></head><body><nav>{links}</nav><h1>{text(title)}</h1>{parts}</body></html>")


def poll_script(url: str, element_id: str, every_s: float = 2.0) -> Markup:
    """Replace element `element_id`'s inner HTML with `url`'s answer every `every_s` seconds (the
    route returns a fragment built with these helpers, so it is escaped server-side)."""
    # JSON string literals inside <script> (HTML entities are not decoded there: an escaped `&`
    # would reach the server as `amp;`); `<`, `>` and `&` as \u escapes so no `</script>` fits in
    u, e = (json.dumps(v).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            for v in (url, element_id))
    return Markup(
        "<script>(function(){var el=document.getElementById(" + e + ");"
        "async function tick(){try{var r=await fetch(" + u + ",{cache:'no-store'});"
        "if(r.ok){el.innerHTML=await r.text();}}catch(e){}setTimeout(tick," + str(int(every_s * 1000)) + ");}"
        "setTimeout(tick," + str(int(every_s * 1000)) + ");})();</script>")
