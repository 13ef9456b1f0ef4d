"""The renderer's dashboard (read only, escaped, offline: bke.adapters.http.page): the versions it
renders (the data tables `bke versions` prints: bke.core.versions and the template ranges, so the page
and the renderer cannot disagree) and its recent renders, newest first, from its own recent
list (history.py)."""
from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from bke.adapters.http.page import Markup, layout, table, text
from bke.adapters.http.query import BadQuery, bad_query, page_args
from bke.core.render import TEMPLATE_RANGES
from bke.adapters.state.recent import RECENT_KEEP
from bke.core.versions import CONTAINERD_MINORS, ETCD_MINORS, KUBERNETES

from .history import RenderHistory

__all__ = ["renderer_routes", "renders_page", "versions_tables"]

_CLASS = {"rendered": "ok", "unchanged": "dim", "failed": "bad"}


def _templates(family: str, minor: str) -> str:
    major, mi = (int(p) for p in minor.split("."))
    return next((r.folder for r in TEMPLATE_RANGES if r.family == family and r.covers(major, mi)), "-")


def versions_tables() -> Markup:
    k8s = table(["kubernetes (any patch)", "etcd (upstream pairing)", "coredns", "pause", "templates"],
                [[r.minor, r.etcd, r.coredns, r.pause, _templates("kubernetes", r.minor)] for r in KUBERNETES.values()],
                id="versions")
    other = table(["component", "minor (any patch)", "templates"],
                  [[c, m, _templates(c, m)] for c, minors in (("etcd", ETCD_MINORS), ("containerd", CONTAINERD_MINORS))
                   for m in minors])
    return Markup(k8s + other)


def _what(e: dict[str, Any]) -> Markup:
    if e.get("result") == "failed":
        items = "".join(f"<li>{text(x)}</li>" for x in e.get("errors") or [])
        return Markup(f"{text(e.get('kind', ''))}<ul>{items}</ul>")
    lines = [f"{e.get('files', '?')} files for {e.get('nodes', '?')} nodes, tier {e.get('tier', '')}; "
             f"templates {', '.join(map(str, e.get('templateSets') or []))}"]
    lines += [f"warning: {w}" for w in e.get("warnings") or []]
    return Markup("<br>".join(text(line) for line in lines))


def renders_page(entries: list[dict[str, Any]]) -> str:
    rows = [[e.get("at", ""), e.get("result", ""), e.get("cluster", ""), e.get("kubernetesVersion", ""),
             e.get("etcdVersion", ""), e.get("requestId", ""), str(e.get("digest", ""))[:12], _what(e)] for e in entries]
    return layout("renderer", "Renderer", Markup("<h2>Versions</h2>"), versions_tables(),
                  Markup(f"<h2>Recent renders</h2><p>The last {len(entries)}, newest first.</p>"),
                  table(["at", "result", "cluster", "kubernetes", "etcd", "request", "digest", "files, or why it failed"],
                        rows, row_class=[_CLASS.get(str(e.get("result")), "") for e in entries], id="renders"),
                  nav=[("/asyncapi", "catalogue")])


def renderer_routes(history: RenderHistory) -> list[Route]:
    async def index(request: Request) -> Response:
        try:
            _, limit = page_args(request, default_limit=RECENT_KEEP, max_limit=RECENT_KEEP)
        except BadQuery as exc:
            return bad_query(exc)
        return HTMLResponse(renders_page(await history.recent(limit)))

    return [Route("/", index, methods=["GET"])]
