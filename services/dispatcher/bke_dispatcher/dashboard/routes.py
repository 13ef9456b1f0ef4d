"""The dashboard's routes (all GET, read only): thin handlers that parse the query, ask the
reader, and render a page, a fragment or its JSON twin.

    /                                   every cluster with its state
    /clusters/{c}?state=&offset=&limit= one cluster: phases timeline, node grid (paged), events
    /clusters/{c}/live?...              the part of that page that refreshes itself
    /clusters/{c}/nodes/{host}          one node: its commands and their step output
    /api/clusters, /api/clusters/{c}, /api/clusters/{c}/nodes/{host}   the same as JSON

A bad query is a 400 naming the field; an unknown cluster or node a 404; a store that does not
answer a 503 saying so (a dashboard never shows figures it could not read).
"""
from __future__ import annotations

import logging
from typing import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from bke.core.errors import is_unavailable

from . import pages
from .read import DashboardReader, Unavailable
from .view import BadQuery, ClusterView, parse_query

__all__ = ["dashboard_routes"]

log = logging.getLogger("bke.dispatcher.dashboard")
Handler = Callable[[Request], Awaitable[Response]]
_NO_STORE = {"Cache-Control": "no-store"}


def _guarded(as_json: bool, handler: Handler) -> Handler:
    """Turn the typed failures into answers: 400 (the field), 503 (the store)."""
    async def guarded(request: Request) -> Response:
        try:
            return await handler(request)
        except BadQuery as exc:
            return _problem(as_json, 400, "Bad request", str(exc), field=exc.field)
        except Unavailable as exc:
            return _problem(as_json, 503, "Unavailable", str(exc))
        except Exception as exc:
            if not is_unavailable(exc):
                raise
            log.warning("dashboard read: store unavailable: %s: %s", type(exc).__name__, exc,
                        extra={"rate_key": "dashboard-unavailable"})
            return _problem(as_json, 503, "Unavailable", f"store unavailable: {type(exc).__name__}")

    return guarded


def _problem(as_json: bool, code: int, title: str, message: str, **extra: str) -> Response:
    if as_json:
        return JSONResponse({"error": title, "message": message, **extra}, status_code=code, headers=_NO_STORE)
    return HTMLResponse(pages.message_page(title, message), status_code=code, headers=_NO_STORE)


def dashboard_routes(reader: DashboardReader) -> list[Route]:
    async def clusters(request: Request) -> Response:
        got = await reader.clusters()
        return HTMLResponse(pages.clusters_page(got), headers=_NO_STORE)

    async def clusters_json(request: Request) -> Response:
        got = await reader.clusters()
        return JSONResponse({"clusters": [
            {"cluster": s.cluster, "status": s.status, "startedAt": s.started_at, "finishedAt": s.finished_at,
             "message": s.message, "nodeCounts": s.node_counts.model_dump(by_alias=True)} for s in got]},
            headers=_NO_STORE)

    def cluster_view(render: Callable[[ClusterView], Response]) -> Handler:
        async def handler(request: Request) -> Response:
            name = request.path_params["name"]
            view = await reader.cluster(name, parse_query(request.query_params))
            if view is None:
                return _problem(render is _json, 404, "Not found", f"cluster {name!r}: no install found")
            return render(view)

        return handler

    def _json(view: ClusterView) -> Response:
        return JSONResponse(view.to_json(), headers=_NO_STORE)

    def _page(view: ClusterView) -> Response:
        return HTMLResponse(pages.cluster_page(view), headers=_NO_STORE)

    def _fragment(view: ClusterView) -> Response:
        return HTMLResponse(str(pages.cluster_fragment(view)), headers=_NO_STORE)

    def node_view(as_json: bool) -> Handler:
        async def handler(request: Request) -> Response:
            name, host = request.path_params["name"], request.path_params["host"]
            node = await reader.node(name, host)
            if node is None:
                return _problem(as_json, 404, "Not found", f"cluster {name!r}: no node {host!r}")
            if as_json:
                return JSONResponse(node.to_json(), headers=_NO_STORE)
            return HTMLResponse(pages.node_page(node), headers=_NO_STORE)

        return handler

    def get(path: str, handler: Handler, as_json: bool = False) -> Route:
        return Route(path, _guarded(as_json, handler), methods=["GET"])

    return [
        get("/", clusters),
        get("/clusters/{name}", cluster_view(_page)),
        get("/clusters/{name}/live", cluster_view(_fragment)),
        get("/clusters/{name}/nodes/{host:path}", node_view(False)),
        get("/api/clusters", clusters_json, True),
        get("/api/clusters/{name}", cluster_view(_json), True),
        get("/api/clusters/{name}/nodes/{host:path}", node_view(True), True),
    ]
