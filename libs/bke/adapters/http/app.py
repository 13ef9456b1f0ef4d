"""The ASGI app of one service: the probes and metrics every service has, then its own routes
(its dashboard and read-only JSON), all GET. Nothing here writes: a dashboard is read only."""
from __future__ import annotations

import html
from typing import Any, Callable, Sequence

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Route

from .catalogue import catalogue_routes
from .metrics import ServiceMetrics

__all__ = ["build_app"]

PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"


def build_app(service: str, metrics: ServiceMetrics, health: Callable[[], Any], routes: Sequence[BaseRoute]) -> Starlette:
    """`health()` returns the service's `ServiceHealth` (bke.adapters.bus.readiness.Readiness.snapshot)."""

    async def healthz(_: Request) -> Response:
        # alive: the process answers. Readiness is /readyz: a liveness probe that followed the
        # store would restart every replica during a Redis outage that they are built to ride out.
        return JSONResponse({"service": service, "alive": True})

    async def readyz(_: Request) -> Response:
        snap = health()
        return JSONResponse(snap.model_dump(mode="json"), status_code=200 if snap.ready else 503)

    async def metrics_text(_: Request) -> Response:
        return Response(await metrics.exposition(), media_type=PROMETHEUS_TEXT)

    own = list(routes)
    core: list[BaseRoute] = [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", metrics_text, methods=["GET"]),
        *catalogue_routes(service),  # /asyncapi, /asyncapi.yaml: the event catalogue
    ]
    if not any(getattr(r, "path", None) == "/" for r in own):
        async def index(_: Request) -> Response:
            name = html.escape(service)
            return HTMLResponse(f"<!doctype html><title>bke-{name}</title><h1>bke-{name}</h1>"
                                '<ul><li><a href="/readyz">/readyz</a></li><li><a href="/metrics">/metrics</a></li>'
                                '<li><a href="/asyncapi">/asyncapi</a></li></ul>')

        core.append(Route("/", index, methods=["GET"]))
    return Starlette(routes=core + own)
