"""The dashboard's HTML: built from the views with bke.adapters.http.page's pieces, so every value is
escaped there; the few pieces made here (the grid's coloured cells, the timeline bars, links
with query strings) escape their own values with `page.text` / `html.escape`."""
from __future__ import annotations

import html
import json
from urllib.parse import quote, urlencode

from bke.contracts.status import ClusterStatus
from bke.contracts.statuses import CommandStatus, HealthStatus, PhaseStatus
from bke.adapters.http.page import Markup, layout, link, table, text

from .view import NODE_STATES, PAGE_SIZE, ClusterView, NodeDetail, NodeQuery, PhaseRow

__all__ = ["SERVICE", "LIVE_ID", "POLL_S", "cluster_fragment", "cluster_page", "cluster_url", "clusters_page",
           "message_page", "node_page", "node_url"]

SERVICE = "dispatcher"
LIVE_ID = "live"
POLL_S = 2.0
_CLASS = {PhaseStatus.SUCCEEDED: "ok", PhaseStatus.FAILED: "bad", PhaseStatus.RUNNING: "run", CommandStatus.RETRY: "run",
          PhaseStatus.PENDING: "dim", PhaseStatus.SKIPPED: "dim", HealthStatus.HEALTHY: "ok", HealthStatus.UNHEALTHY: "bad"}
_BAR_PX = 360  # the whole timeline's width
_BAR_COLOUR = {PhaseStatus.SUCCEEDED: "#5a5", PhaseStatus.FAILED: "#c55", PhaseStatus.RUNNING: "#cb4"}


def cluster_url(cluster: str, query: NodeQuery | None = None, *, live: bool = False) -> str:
    url = f"/clusters/{quote(cluster, safe='')}" + ("/live" if live else "")
    if query is not None:
        params = {k: v for k, v in (("state", query.state), ("offset", query.offset or None),
                                    ("limit", query.limit if query.limit != PAGE_SIZE else None)) if v}
        if params:
            url += "?" + urlencode(params)
    return url


def node_url(cluster: str, hostname: str) -> str:
    return f"/clusters/{quote(cluster, safe='')}/nodes/{quote(hostname, safe='')}"


def _cls(status: str) -> str:
    return _CLASS.get(status, "")


def _secs(s: float | None) -> str:
    if s is None:
        return ""
    return f"{s:.1f} s" if s < 120 else f"{s / 60:.1f} min"


def clusters_page(clusters: list[ClusterStatus]) -> str:
    rows = [(link(cluster_url(s.cluster), s.cluster), s.status, _when(s.started_at), _when(s.finished_at),
             f"{s.node_counts.succeeded}/{s.node_counts.total}", s.node_counts.failed, s.message[:200])
            for s in clusters]
    body = table(["cluster", "state", "started", "finished", "nodes done", "nodes failed", "message"], rows,
                 row_class=[_cls(s.status) for s in clusters], id="clusters") if clusters \
        else text("No install recorded yet.")
    return layout(SERVICE, "Clusters", body)


def _when(ts: str | None) -> Markup:
    """A timestamp to the second, the full one on hover."""
    if not ts:
        return Markup("")
    return Markup(f'<span title="{html.escape(ts, quote=True)}">{text(ts[:19].replace("T", " "))}</span>')


def _bar(p: PhaseRow, span_s: float) -> Markup:
    """The phase on the install's time axis: from its start, as long as it took (so far)."""
    if p.offset_s is None or p.duration_s is None:
        return Markup("")
    left = int(_BAR_PX * p.offset_s / span_s)
    width = max(2, int(_BAR_PX * p.duration_s / span_s))
    colour = _BAR_COLOUR.get(p.status, "#999")
    return Markup(f'<span style="display:inline-block;width:{_BAR_PX + 2}px">'
                  f'<span style="display:inline-block;height:.8em;margin-left:{left}px;width:{width}px;'
                  f'background:{colour}"></span></span>')


def _timeline(phases: list[PhaseRow]) -> Markup:
    span_s = max(((p.offset_s or 0.0) + (p.duration_s or 0.0) for p in phases), default=0.0) or 1.0
    rows = [(Markup(f'<span title="{html.escape(p.summary, quote=True)}">{text(p.name)}</span>'), p.status,
             _when(p.started_at), _when(p.finished_at), _secs(p.duration_s),
             f"{p.done}/{p.total}" if p.total else "", _bar(p, span_s), p.message[:300]) for p in phases]
    return table(["phase", "state", "started", "finished", "duration", "nodes", "timeline", "message"], rows,
                 row_class=[_cls(p.status) for p in phases], id="phases")


def _filters(view: ClusterView) -> Markup:
    c, n = view.status.cluster, view.nodes
    items = [link(cluster_url(c), f"all {sum(n.counts.values())}") if n.query.state else text(f"all {sum(n.counts.values())}")]
    for st in NODE_STATES:
        label = f"{st} {n.counts.get(st, 0)}"
        items.append(text(label) if n.query.state == st else link(cluster_url(c, NodeQuery(state=st)), label))
    return Markup('<p id="node-counts">' + " · ".join(items) + "</p>")


def _pager(view: ClusterView) -> Markup:
    c, n = view.status.cluster, view.nodes
    first = n.query.offset + 1 if n.rows else 0
    parts = [text(f"nodes {first}-{n.query.offset + len(n.rows)} of {n.matched}")]
    if n.prev_offset is not None:
        parts.append(link(cluster_url(c, NodeQuery(n.query.state, n.prev_offset, n.query.limit)), "previous"))
    if n.next_offset is not None:
        parts.append(link(cluster_url(c, NodeQuery(n.query.state, n.next_offset, n.query.limit)), "next"))
    return Markup('<p id="pager">' + " ".join(parts) + "</p>")


def _grid(view: ClusterView) -> Markup:
    n, c = view.nodes, view.status.cluster
    out = ['<table id="grid"><tr><th>node</th><th>state</th><th>step</th>']
    out += [f"<th>{text(slug)}</th>" for slug in n.columns]
    out.append("</tr>")
    for r in n.rows:
        out.append(f'<tr><td class="{_cls(r.status)}">{link(node_url(c, r.hostname), r.hostname)}</td>'
                   f'<td class="{_cls(r.status)}">{text(r.status)}</td><td>{text(r.step)}</td>')
        out += [f'<td class="{_cls(r.cells.get(s, ""))}">{text(r.cells.get(s, ""))}</td>' for s in n.columns]
        out.append("</tr>")
    out.append("</table>")
    return Markup("".join(out))


def _component_grid(view: ClusterView) -> Markup:
    """The same page of nodes, by component: each cell the component's latest health answer on
    that node, or the state of the command that installs it (bke_dispatcher.dashboard.view)."""
    n, c = view.nodes, view.status.cluster
    if not n.component_columns:
        return Markup("")
    out = ['<h3>By component</h3><table id="components"><tr><th>node</th>']
    out += [f"<th>{text(comp)}</th>" for comp in n.component_columns]
    out.append("</tr>")
    for r in n.rows:
        out.append(f"<tr><td>{link(node_url(c, r.hostname), r.hostname)}</td>")
        for comp in n.component_columns:
            if comp not in r.components:
                out.append('<td class="dim"></td>')  # not on this node
                continue
            cell = r.components[comp]
            out.append(f'<td class="{_cls(cell)}">{text(cell or "-")}</td>')
        out.append("</tr>")
    out.append("</table>")
    return Markup("".join(out))


def cluster_fragment(view: ClusterView) -> Markup:
    """What the page refreshes in place (also the body of the first load)."""
    s = view.status
    head = table(["state", "request", "started", "finished", "message"],
                 [(s.status, s.request_id, _when(s.started_at), _when(s.finished_at), s.message[:500])],
                 row_class=[_cls(s.status)], id="install")
    failing = Markup("")
    if view.nodes.failing:
        failing = Markup("<h2>Failing nodes</h2><p id=\"failing\">"
                         + ", ".join(link(node_url(s.cluster, h), h) for h in view.nodes.failing) + "</p>")
    events = table(["at", "event", "phase", "state", "node", "step", "message"],
                   [(_when(e.at), e.kind, e.phase, e.status, Markup(link(node_url(s.cluster, e.node), e.node)) if e.node else "",
                     e.step, e.message[:300]) for e in view.events],
                   row_class=[_cls(e.status) for e in view.events], id="events") if view.events \
        else text("No event published by this dispatcher since it started.")
    return Markup("".join([head, "<h2>Phases</h2>", _timeline(view.phases), failing, "<h2>Nodes</h2>",
                           _filters(view), _pager(view), _grid(view), _component_grid(view),
                           "<h2>Latest events</h2>", events]))


def _live_script(url: str, element_id: str, every_s: float) -> Markup:
    """Refresh `element_id` from `url` (a fragment escaped server-side). Not page.poll_script:
    that one HTML-escapes the URL, and inside <script> an entity stays as written, so a URL with
    two query parameters (`?state=Failed&offset=200`) would arrive as `amp;offset`. Here the URL
    is a JSON string with `<`, `>` and `&` as \\u escapes, which is safe inside <script>."""
    js_url = json.dumps(url).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    js_id = json.dumps(element_id).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    ms = int(every_s * 1000)
    return Markup(
        "<script>(function(){var el=document.getElementById(" + js_id + ");"
        "async function tick(){try{var r=await fetch(" + js_url + ",{cache:'no-store'});"
        "if(r.ok){el.innerHTML=await r.text();el.dataset.updated=String(Date.now());}}catch(e){}"
        "setTimeout(tick," + str(ms) + ");}setTimeout(tick," + str(ms) + ");})();</script>")


def cluster_page(view: ClusterView) -> str:
    c = view.status.cluster
    live = cluster_url(c, view.nodes.query, live=True)
    return layout(SERVICE, f"Cluster {c}",
                  Markup(f'<div id="{LIVE_ID}">{cluster_fragment(view)}</div>'), _live_script(live, LIVE_ID, POLL_S),
                  nav=[(cluster_url(c), c), (f"/api{cluster_url(c, view.nodes.query)}", "json")])


def node_page(node: NodeDetail) -> str:
    head = table(["node", "state", "phase", "step", "components"],
                 [(node.hostname, node.status, node.phase, node.step, ", ".join(node.components))],
                 row_class=[_cls(node.status)], id="node")
    parts: list[Markup] = [head, Markup("<h2>Commands</h2>")]
    if not node.commands:
        parts.append(text("No command was sent to this node yet."))
    for rec in node.commands:
        parts.append(table(["phase", "state", "step", "at", "command"], [(rec.phase, rec.status, rec.step, _when(rec.at), rec.command_id)],
                           row_class=[_cls(rec.status)]))
        if rec.output:
            parts.append(Markup(f'<pre class="output">{text(rec.output)}</pre>'))
    c = node.cluster
    return layout(SERVICE, f"Node {node.hostname} of {c}", *parts,
                  nav=[(cluster_url(c), c), (f"/api{node_url(c, node.hostname)}", "json")])


def message_page(title: str, message: str) -> str:
    return layout(SERVICE, title, Markup("<p>"), text(message), Markup("</p>"))
