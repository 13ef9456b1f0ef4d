"""The planner's dashboard (read only, escaped, offline: bke.adapters.http.page): its recent plans and
rejections, newest first, each rejection with its errors (field path and message), from its
own recent list (history.py). `?result=rejected` or `created` keeps one kind."""
from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from bke.adapters.http.page import Markup, layout, table, text
from bke.adapters.http.query import BadQuery, bad_query, page_args
from bke.adapters.state.recent import RECENT_KEEP

from .history import PlanHistory

__all__ = ["plans_page", "planner_routes"]

RESULTS = ("created", "rejected")


def _what(e: dict[str, Any]) -> Markup:
    if e.get("result") == "rejected":
        items = "".join(f"<li><code>{text(x.get('path', ''))}</code>: {text(x.get('message', ''))}</li>"
                        for x in e.get("errors") or [] if isinstance(x, dict))
        return Markup(f"<ul>{items}</ul>")
    lines = [f"{e.get('nodes', '?')} nodes; etcd clusters: {', '.join(map(str, e.get('etcdClusters') or []))}"]
    lines += [f"warning: {w}" for w in e.get("warnings") or []]
    return Markup("<br>".join(text(line) for line in lines))


def plans_page(entries: list[dict[str, Any]], result: str, counts: dict[str, float]) -> str:
    if result:
        entries = [e for e in entries if e.get("result") == result]
    rows = [[e.get("at", ""), e.get("result", ""), e.get("cluster", ""), e.get("requestId", ""),
             str(e.get("digest", ""))[:12], _what(e)] for e in entries]
    classes = ["ok" if e.get("result") == "created" else "bad" for e in entries]
    intro = Markup(f"<p>The last {len(entries)} answer(s), newest first. Since this planner started: "
                   f"{int(counts.get('created', 0))} created, {int(counts.get('rejected', 0))} rejected.</p>")
    return layout("planner", "Plans and rejections", intro,
                  table(["at", "result", "cluster", "request", "plan digest", "nodes, or why rejected"], rows,
                        row_class=classes, id="plans"),
                  nav=[("/?result=rejected", "rejections"), ("/asyncapi", "catalogue")])


def planner_routes(history: PlanHistory, sample: Any) -> list[Route]:
    async def index(request: Request) -> Response:
        result = request.query_params.get("result", "")
        try:
            if result not in ("", *RESULTS):
                raise BadQuery(f"result: {result[:40]!r} is not one of {', '.join(RESULTS)}")
            _, limit = page_args(request, default_limit=RECENT_KEEP, max_limit=RECENT_KEEP)
        except BadQuery as exc:
            return bad_query(exc)
        counts = {r: sample("bke_plans_total", {"result": r}) or 0.0 for r in RESULTS}
        return HTMLResponse(plans_page(await history.recent(limit), result, counts))

    return [Route("/", index, methods=["GET"])]
