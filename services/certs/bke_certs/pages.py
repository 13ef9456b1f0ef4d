"""The certs service's dashboard (read only, escaped, offline: bke.adapters.http.page):

    /                      every cluster with a stored PKI: certificates by time left
    /clusters/{cluster}    its certificates, CAs first: expiry, days left, CA, the nodes holding
                           each (paged; `?node=NAME` keeps the ones a node holds)

Everything comes from the service's own store through `ExpiryView`.
"""
from __future__ import annotations

from datetime import datetime
from typing import Callable
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from bke.adapters.http.page import Markup, layout, link, table, text
from bke.adapters.http.query import BadQuery, bad_query, page_args, pager
from bke.core.pki.expiry import ExpiryRow

from .expiry_view import BUCKETS, LATER, ExpiryView, bucket_of, expiry_buckets

__all__ = ["NODES_SHOWN", "certs_routes"]

NODES_SHOWN = 8  # a CA is held by every node: the cell names a few and counts the rest
_CLASS = {"expired": "bad", "7d": "bad", "30d": "run"}


def _nodes(nodes: tuple[str, ...]) -> str:
    shown = ", ".join(nodes[:NODES_SHOWN])
    return shown + (f" and {len(nodes) - NODES_SHOWN} more" if len(nodes) > NODES_SHOWN else "")


def _days(r: ExpiryRow) -> str:
    return f"{r.residual.total_seconds() / 86400:.1f}"


def clusters_page(rows_by_cluster: dict[str, list[ExpiryRow]], now: datetime) -> str:
    labels = [label for label, _ in BUCKETS] + [LATER]
    body = []
    for cluster, rows in rows_by_cluster.items():
        b = expiry_buckets(rows, now)
        first = min((r.not_after for r in rows), default=None)
        body.append([link(f"/clusters/{quote(cluster, safe='')}", cluster), len(rows), *(b[label] for label in labels),
                     first.isoformat() if first else "-"])
    intro = Markup(f"<p>Certificates by time left before they expire, as of {now.isoformat()}.</p>")
    return layout("certs", "Certificates", intro,
                  table(["cluster", "certificates", *labels, "first expiry"], body, id="clusters"),
                  nav=[("/asyncapi", "catalogue")])


def cluster_page(cluster: str, rows: list[ExpiryRow], now: datetime, offset: int, limit: int, node: str) -> str:
    if node:
        rows = [r for r in rows if node in r.nodes]
    page = rows[offset: offset + limit]
    body = [[r.instance, r.name, "CA" if r.is_ca else "", r.not_after.isoformat(), _days(r), r.ca or "",
             len(r.nodes), _nodes(r.nodes)] for r in page]
    classes = [_CLASS.get(bucket_of(r.residual), "") for r in page]
    extra = {"node": node} if node else {}
    what = f" held by node {node}" if node else ""
    intro = Markup(f"<p>{len(rows)} certificate(s){text(what)}, CAs first, as of {now.isoformat()}. "
                   f"Days left under 7 are red, under 30 yellow.</p>")
    return layout("certs", f"Certificates of {cluster}", intro,
                  pager(f"/clusters/{quote(cluster, safe='')}", offset, limit, len(rows), **extra),
                  table(["instance", "certificate", "CA?", "not after", "days left", "signed by", "nodes", "held by"],
                        body, row_class=classes, id="certificates"),
                  nav=[("/asyncapi", "catalogue")])


def certs_routes(view: ExpiryView, now: Callable[[], datetime]) -> list[Route]:
    async def index(_: Request) -> Response:
        t = now()
        return HTMLResponse(clusters_page(await view.all_rows(t), t))

    async def one(request: Request) -> Response:
        cluster = request.path_params["cluster"]
        try:
            offset, limit = page_args(request, default_limit=200)
        except BadQuery as exc:
            return bad_query(exc)
        t = now()
        rows = await view.rows(cluster, t) if cluster in await view.clusters() else None
        if rows is None:
            return HTMLResponse(layout("certs", "Not found", Markup("<p>No PKI is stored for this cluster.</p>")),
                                status_code=404)
        return HTMLResponse(cluster_page(cluster, rows, t, offset, limit, request.query_params.get("node", "")))

    return [Route("/", index, methods=["GET"]), Route("/clusters/{cluster}", one, methods=["GET"])]
