"""The upgrader's dashboard (read only, escaped, offline: bke.adapters.http.page), from its run records:

    /                              every cluster's current or last upgrade
    /upgrades/{cluster}            one run: its steps with their progress, failures, left-out nodes
    .../fragment, /runs            the same tables alone: the pages poll them (bke.adapters.http.page
                                   `poll_script`), so they update while the upgrade runs
"""
from __future__ import annotations

from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from bke.contracts.statuses import RunStatus
from bke.adapters.http.page import Markup, layout, link, poll_script, table, text
from bke.core.upgrade.run import UpgradeRun

from .progress import NODE_STATES, node_states, progress_ratio
from .store import UpgradeStore

__all__ = ["run_fragment", "runs_fragment", "upgrader_routes"]

_CLASS = {RunStatus.SUCCEEDED: "ok", RunStatus.FAILED: "bad", RunStatus.RUNNING: "run", RunStatus.SKIPPED: "dim"}


def _versions(v: dict[str, str]) -> str:
    return ", ".join(f"{k} {v[k]}" for k in sorted(v))


def _href(cluster: str) -> str:
    return f"/upgrades/{quote(cluster, safe='')}"


def runs_fragment(runs: list[UpgradeRun]) -> Markup:
    rows = []
    for run in runs:
        now = run.step_now()
        rows.append([link(_href(run.cluster), run.cluster), run.request_id, run.status, _versions(run.current),
                     _versions(run.target), now.name if now and run.running else "",
                     f"{progress_ratio(run) * 100:.0f}%", run.started_at, run.finished_at, run.message])
    if not rows:
        return Markup("<p>No upgrade was ever requested.</p>")
    return table(["cluster", "request", "status", "from", "to", "step", "progress", "started", "finished", "message"],
                 rows, row_class=[_CLASS.get(r.status, "") for r in runs])


def run_fragment(run: UpgradeRun) -> Markup:
    states = node_states(run)
    summary = table(["status", "progress", "from", "to", "started", "finished", "message"],
                    [[run.status, f"{progress_ratio(run) * 100:.1f}%", _versions(run.current), _versions(run.target),
                      run.started_at, run.finished_at, run.message]], row_class=[_CLASS.get(run.status, "")])
    nodes = table(list(NODE_STATES), [[states[s] for s in NODE_STATES]])
    steps = table(["step", "group", "status", "nodes done", "nodes", "batch", "batches", "stage", "message"],
                  [[s.name, s.group, s.status, "" if s.local else s.done, "" if s.local else s.total,
                    "" if s.local else min(s.batch + 1, len(s.batches)), "" if s.local else len(s.batches),
                    "" if s.local else s.stage, s.message] for s in run.steps],
                  row_class=[_CLASS.get(s.status, "") for s in run.steps])
    parts = [summary, Markup("<h2>Nodes</h2>"), nodes, Markup("<h2>Steps</h2>"), steps]
    if run.failed:
        parts += [Markup("<h2>Failures</h2>"),
                  table(["node", "outcome", "step", "failed agent step", "what the agent said"],
                        [[f.hostname, f.status, f.step, f.failed_step, Markup(f"<pre>{text(f.stderr)}</pre>")]
                         for f in run.failed], row_class=["bad"] * len(run.failed))]
    if run.left_out:
        parts += [Markup("<h2>Left out</h2>"), Markup(f"<p>{text(', '.join(run.left_out))}</p>")]
    return Markup("".join(parts))


def _live(fragment: Markup, url: str) -> list[Any]:
    return [Markup('<div id="live">'), fragment, Markup("</div>"), poll_script(url, "live")]


def upgrader_routes(store: UpgradeStore) -> list[Route]:
    async def runs() -> list[UpgradeRun]:
        return [run for c in await store.clusters() if (run := await store.load(c)) is not None]

    async def index(_: Request) -> Response:
        return HTMLResponse(layout("upgrader", "Upgrades", *_live(runs_fragment(await runs()), "/runs"),
                                   nav=[("/asyncapi", "catalogue")]))

    async def index_fragment(_: Request) -> Response:
        return HTMLResponse(runs_fragment(await runs()))

    async def one(request: Request) -> Response:
        cluster = request.path_params["cluster"]
        run = await store.load(cluster)
        if run is None:
            return HTMLResponse(layout("upgrader", "Not found", Markup("<p>No upgrade of this cluster.</p>")),
                                status_code=404)
        return HTMLResponse(layout("upgrader", f"Upgrade of {cluster}",
                                   *_live(run_fragment(run), _href(cluster) + "/fragment"),
                                   nav=[("/asyncapi", "catalogue")]))

    async def one_fragment(request: Request) -> Response:
        run = await store.load(request.path_params["cluster"])
        if run is None:
            return HTMLResponse("<p>No upgrade of this cluster.</p>", status_code=404)
        return HTMLResponse(run_fragment(run))

    return [Route("/", index, methods=["GET"]), Route("/runs", index_fragment, methods=["GET"]),
            Route("/upgrades/{cluster}", one, methods=["GET"]),
            Route("/upgrades/{cluster}/fragment", one_fragment, methods=["GET"])]
