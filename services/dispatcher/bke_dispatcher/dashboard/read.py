"""The dashboard's reads: the status read model (`StatusReader`, the same reply `bke status`
gets) for each cluster's state and phases, and the dispatcher's own records (`DispatcherState`)
for one page of nodes and their per-phase commands. Nothing here reads another service's keys.

Cost of a cluster page at N nodes: the status read (one pipeline), the node hash once more to
count and filter, and one HMGET per phase for the page's nodes only (never N command records).
"""
from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Callable

from pydantic import ValidationError

from bke.contracts.status import ClusterStatus, GetStatus
from bke.errors import TemporaryError
from bke.state import PlanCache

from ..phases import PHASES
from ..state import DispatcherState
from ..status import StatusReader
from .events import RecentEvents
from .view import (
    ClusterView,
    NodeDetail,
    NodePage,
    NodeQuery,
    NodeRow,
    StepRecord,
    cell_state,
    select_nodes,
    timeline,
)

__all__ = ["DashboardReader", "Unavailable"]

EVENTS_SHOWN = 30


class Unavailable(Exception):
    """The status read model answered with an error other than NotFound (the store is away,
    the state was lost): the page says so instead of showing stale or partial figures."""


class DashboardReader:
    def __init__(self, status: StatusReader, state: DispatcherState, plans: PlanCache, events: RecentEvents,
                 now: Callable[[], datetime], guard: Callable[[], None] = lambda: None):
        self.status, self.state, self.plans, self.events, self.now = status, state, plans, events, now
        self.guard = guard  # raises TemporaryError while the state is lost (bke.state.epoch), as for `bke status`

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

    async def _order(self, cluster: str, node_states: dict[str, dict]) -> tuple[list[str], dict[str, list[str]]]:
        """The plan's node order and each node's components; the recorded nodes, sorted, while
        the plan is not visible (as the status reader does)."""
        try:
            plan = await self.plans.load(cluster)
        except TemporaryError:
            return sorted(node_states), {}
        return [n.hostname for n in plan.nodes], {n.hostname: list(n.components) for n in plan.nodes}

    async def cluster(self, cluster: str, query: NodeQuery) -> ClusterView | None:
        status = await self._status(cluster)
        if status is None:
            return None
        node_states = await self.state.nodes(cluster)
        order, _ = await self._order(cluster, node_states)
        counts, matched, page, failing = select_nodes(order, node_states, query)
        columns = [p.name for p in status.phases if p.total > 0 and _sends_commands(p.name)]
        cmds = await asyncio.gather(*(self.state.commands(cluster, slug, page) for slug in columns))
        rows = []
        for h in page:
            st = node_states.get(h) or {}
            rows.append(NodeRow(hostname=h, status=str(st.get("status") or "Pending"), phase=str(st.get("phase") or ""),
                                step=str(st.get("step") or ""),
                                cells={slug: cell_state(c.get(h)) for slug, c in zip(columns, cmds)}))
        nodes = NodePage(query=query, counts=counts, matched=matched, columns=columns, rows=rows, failing=failing)
        return ClusterView(status=status, phases=timeline(status.phases, self.now()), nodes=nodes,
                           events=self.events.latest(cluster, EVENTS_SHOWN))

    async def node(self, cluster: str, hostname: str) -> NodeDetail | None:
        if await self._status(cluster) is None:
            return None
        node_states = await self.state.nodes(cluster)
        order, components = await self._order(cluster, node_states)
        if hostname not in node_states and hostname not in components and hostname not in order:
            return None
        slugs = [p.slug for p in PHASES if _sends_commands(p.slug)]
        got = await asyncio.gather(*(self.state.commands(cluster, slug, [hostname]) for slug in slugs))
        commands = [
            StepRecord(phase=slug, status=cell_state(c), step=str(c.get("step") or ""), output=str(c.get("stderr") or ""),
                       at=str(c.get("at") or ""), command_id=str(c.get("id") or ""))
            for slug, one in zip(slugs, got) if (c := one.get(hostname))
        ]
        st = node_states.get(hostname) or {}
        return NodeDetail(cluster=cluster, hostname=hostname, status=str(st.get("status") or "Pending"),
                          phase=str(st.get("phase") or ""), step=str(st.get("step") or ""),
                          components=components.get(hostname, []), commands=commands)


def _sends_commands(slug: str) -> bool:
    """A phase with a step builder sends each target a command (a grid column); addons and
    node-labels are the dispatcher's own work."""
    return any(p.slug == slug and p.build is not None for p in PHASES)
