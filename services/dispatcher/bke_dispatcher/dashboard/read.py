"""The dashboard's reads: the status read model (`StatusReader`, the same reply `bke status`
gets) for each cluster's state and phases, and the dispatcher's own records (`DispatcherState`)
for one page of nodes and their per-phase commands. Nothing here reads another service's keys.

Cost of a cluster page at N nodes: the status read (one pipeline), then one script in Redis
(`_NODE_PAGE`) that counts every node by state, filters, and returns one page of nodes with their
cell per phase: N node records are decoded inside Redis (a few ms at 5,000), and only the page
(`limit` rows, 200 by default) crosses to Python, whose RESP parsing of a 5,000-entry hash
costs about as much as everything else on the page.
"""
from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from datetime import datetime
from typing import Any, Callable

from pydantic import ValidationError

from bke.contracts.status import ClusterStatus, GetStatus
from bke.contracts.statuses import NodeStatus
from bke.core.errors import TemporaryError
from bke.adapters.state import PlanCache
from bke.adapters.state.keys.dispatcher import command_key, health_key, node_status_key

from ..phases import PHASES
from ..state import DispatcherState
from ..status import StatusReader
from .events import RecentEvents
from .view import (
    component_cell,
    ClusterView,
    NodeDetail,
    NodePage,
    NodeQuery,
    NodeRow,
    StepRecord,
    FAILING_SHOWN,
    NODE_STATES,
    cell_state,
    timeline,
)

__all__ = ["DashboardReader", "Unavailable"]

EVENTS_SHOWN = 30

# KEYS[1]: the node hash; KEYS[2..]: the command hashes of the grid's columns.
# ARGV: state wanted ('' for every node), offset, limit, how many failing names, every hostname
# in plan order joined by newlines (one argument: encoding 5,000 arguments cost the client more
# than the script costs Redis; no hostname holds a newline). Returns {{pending, running, succeeded, failed, matched}, failing names,
# page rows {hostname, node record or '', each column's command status or ''}}.
# A node with no record is Pending (no command reached it), as in the status read model.
# The status is matched, not decoded: a record's `"status": "<word>"` can only be its own key (a
# quote inside any JSON string value is escaped), and decoding 5,000 records took Redis 50 ms.
_NODE_PAGE = """
local STATUS = '"status":%s*"(%a+)"'
local want, offset, limit, fmax = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local raw = redis.call('HGETALL', KEYS[1])
local docs = {}
for i = 1, #raw, 2 do docs[raw[i]] = raw[i + 1] end
local counts = {Pending = 0, Running = 0, Succeeded = 0, Failed = 0}
local matched, failing, page = 0, {}, {}
for h in string.gmatch(ARGV[5], '[^\\n]+') do
  local st = 'Pending'
  local d = docs[h]
  if d then st = string.match(d, STATUS) or 'Pending' end
  counts[st] = (counts[st] or 0) + 1
  if st == 'Failed' and #failing < fmax then failing[#failing + 1] = h end
  if want == '' or st == want then
    if matched >= offset and matched < offset + limit then page[#page + 1] = h end
    matched = matched + 1
  end
end
local rows = {}
for _, h in ipairs(page) do
  local row = {h, docs[h] or ''}
  for k = 2, #KEYS do
    local c = redis.call('HGET', KEYS[k], h)
    row[#row + 1] = c and string.match(c, STATUS) or ''
  end
  rows[#rows + 1] = row
end
return {{counts.Pending, counts.Running, counts.Succeeded, counts.Failed, matched}, failing, rows}
"""


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class Unavailable(Exception):
    """The status read model answered with an error other than NotFound (the store is away,
    the state was lost): the page says so instead of showing stale or partial figures."""


class DashboardReader:
    def __init__(self, status: StatusReader, state: DispatcherState, plans: PlanCache, events: RecentEvents,
                 now: Callable[[], datetime], guard: Callable[[], None] = lambda: None):
        self.status, self.state, self.plans, self.events, self.now = status, state, plans, events, now
        self.guard = guard  # raises TemporaryError while the state is lost (bke.adapters.state.epoch), as for `bke status`
        self._script = state.r.register_script(_NODE_PAGE)  # EVALSHA, loaded again after a Redis restart
        self._order_text: dict[str, tuple[list[str], str]] = {}  # cluster -> (order, newline-joined)

    def _joined(self, cluster: str, order: list[str]) -> str:
        """The order as the script's one argument; made again only when the order changes."""
        cached = self._order_text.get(cluster)
        if cached is None or cached[0] != order:
            cached = (order, "\n".join(h for h in order if "\n" not in h))
            self._order_text[cluster] = cached
        return cached[1]

    async def _status(self, cluster: str) -> ClusterStatus | None:
        try:
            self.guard()
        except TemporaryError as exc:
            raise Unavailable(str(exc)[:500]) from exc
        try:
            req = GetStatus(cluster=cluster, nodes="none")
        except ValidationError:
            return None  # no cluster can have that name
        reply = await self.status.read(req)
        if isinstance(reply, ClusterStatus):
            return reply
        if reply.reason == "NotFound":
            return None
        raise Unavailable(reply.message)

    async def clusters(self) -> list[ClusterStatus]:
        """Every cluster with an install record, by name."""
        names = await self.state.installs()
        got = await asyncio.gather(*(self._status(c) for c in names))
        return [s for s in got if s is not None]

    async def _plan_nodes(self, cluster: str) -> tuple[list[str], dict[str, list[str]]]:
        """The plan's node order and each node's components; the recorded nodes, sorted, while
        the plan is not visible (as the status reader does)."""
        try:
            plan = await self.plans.load(cluster)
        except TemporaryError:
            return sorted(_s(h) for h in await self.state.r.hkeys(node_status_key(cluster))), {}
        return [n.hostname for n in plan.nodes], {n.hostname: list(n.components) for n in plan.nodes}

    async def _node_page(self, cluster: str, order: list[str], columns: list[str], query: NodeQuery,
                         components: dict[str, list[str]] | None = None) -> NodePage:
        keys = [node_status_key(cluster), *(command_key(cluster, slug) for slug in columns)]
        args: list[str | int] = [query.state or "", query.offset, query.limit, FAILING_SHOWN, self._joined(cluster, order)]
        figures, failing, raw_rows = await self._script(keys=keys, args=args)
        rows = []
        for raw in raw_rows:
            host, doc_text, cells = _s(raw[0]), _s(raw[1]), [_s(c) for c in raw[2:]]
            doc = json.loads(doc_text) if doc_text else {}
            rows.append(NodeRow(hostname=host, status=str(doc.get("status") or NodeStatus.PENDING), phase=str(doc.get("phase") or ""),
                                step=str(doc.get("step") or ""),
                                cells={slug: cell_state({"status": c}) for slug, c in zip(columns, cells)}))
        counts = dict(zip(NODE_STATES, (int(n) for n in figures[:4])))
        rows, component_columns = await self._components(cluster, rows, components or {})
        return NodePage(query=query, counts=counts, matched=int(figures[4]), columns=columns, rows=rows,
                        failing=[_s(h) for h in failing], component_columns=component_columns)

    async def _components(self, cluster: str, rows: list[NodeRow],
                          components: dict[str, list[str]]) -> tuple[list[NodeRow], list[str]]:
        """The page's rows with their nodes x components cells (one HMGET of the page's health
        answers: a page is at most MAX_PAGE_SIZE nodes), and the columns in plan order."""
        if not rows or not components:
            return rows, []
        raw = await self.state.r.hmget(health_key(cluster), [r.hostname for r in rows])
        out, columns = [], []
        for r, h in zip(rows, raw):
            health = json.loads(h) if h else None
            comps = components.get(r.hostname, [])
            columns += [c for c in comps if c not in columns]
            out.append(replace(r, components={c: component_cell(c, r.cells, health) for c in comps}))
        return out, columns

    async def cluster(self, cluster: str, query: NodeQuery) -> ClusterView | None:
        status = await self._status(cluster)
        if status is None:
            return None
        order, components = await self._plan_nodes(cluster)
        columns = [p.name for p in status.phases if p.total > 0 and _sends_commands(p.name)]
        nodes = await self._node_page(cluster, order, columns, query, components)
        return ClusterView(status=status, phases=timeline(status.phases, self.now()), nodes=nodes,
                           events=self.events.latest(cluster, EVENTS_SHOWN))

    async def node(self, cluster: str, hostname: str) -> NodeDetail | None:
        if await self._status(cluster) is None:
            return None
        order, components = await self._plan_nodes(cluster)
        if hostname not in components and hostname not in order:
            return None
        slugs = [p.slug for p in PHASES if _sends_commands(p.slug)]
        got = await asyncio.gather(*(self.state.commands(cluster, slug, [hostname]) for slug in slugs))
        commands = [
            StepRecord(phase=slug, status=cell_state(c), step=str(c.get("step") or ""), output=str(c.get("stderr") or ""),
                       at=str(c.get("at") or ""), command_id=str(c.get("id") or ""))
            for slug, one in zip(slugs, got) if (c := one.get(hostname))
        ]
        raw = await self.state.r.hget(node_status_key(cluster), hostname)
        st = json.loads(raw) if raw else {}
        return NodeDetail(cluster=cluster, hostname=hostname, status=str(st.get("status") or NodeStatus.PENDING),
                          phase=str(st.get("phase") or ""), step=str(st.get("step") or ""),
                          components=components.get(hostname, []), commands=commands)


def _sends_commands(slug: str) -> bool:
    """A phase with a step builder sends each target a command (a grid column); addons and
    node-labels are the dispatcher's own work."""
    return any(p.slug == slug and p.build is not None for p in PHASES)
