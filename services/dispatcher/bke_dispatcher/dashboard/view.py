"""The dashboard's pure core: a cluster's status, node states and command records in, the
views the pages and their JSON twins show out. No I/O; `now` is an argument.

At 5,000 nodes a page never lists every node: the per-state counts cover them all, and the grid
is one page (`PAGE_SIZE` rows, `MAX_PAGE_SIZE` at most) of the nodes in plan order, filtered by
state (counted, filtered and paged inside Redis: read.py).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from fnmatch import fnmatchcase
from datetime import datetime
from typing import Any, Mapping

from bke.contracts.status import ClusterStatus, StatusPhase
from bke.contracts.statuses import CommandStatus, HealthStatus, NodeStatus, PhaseStatus

from .events import Event

__all__ = [
    "COMPONENT_PHASES",
    "HEALTH_CHECKED",
    "component_cell",
    "FAILING_SHOWN",
    "MAX_PAGE_SIZE",
    "NODE_STATES",
    "PAGE_SIZE",
    "BadQuery",
    "ClusterView",
    "NodeDetail",
    "NodePage",
    "NodeQuery",
    "NodeRow",
    "PhaseRow",
    "StepRecord",
    "cell_state",
    "duration_s",
    "parse_query",
    "timeline",
]

NODE_STATES = tuple(NodeStatus)
PAGE_SIZE = 200
MAX_PAGE_SIZE = 1000
FAILING_SHOWN = 20  # failing nodes listed by name above the grid (all of them: the Failed filter)


class BadQuery(ValueError):
    """A query parameter the dashboard cannot use; names the field."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


@dataclass(frozen=True)
class NodeQuery:
    state: str | None = None  # one of NODE_STATES, or every node
    offset: int = 0
    limit: int = PAGE_SIZE


def _int(params: Mapping[str, str], name: str, default: int, lo: int, hi: int) -> int:
    raw = params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadQuery(name, f"not a whole number: {raw[:40]!r}") from None
    if not lo <= value <= hi:
        raise BadQuery(name, f"must be between {lo} and {hi}, got {value}")
    return value


def parse_query(params: Mapping[str, str]) -> NodeQuery:
    state = params.get("state") or None
    if state is not None and state not in NODE_STATES:
        raise BadQuery("state", f"must be one of {', '.join(NODE_STATES)}, got {state[:40]!r}")
    return NodeQuery(state=state, offset=_int(params, "offset", 0, 0, 10**7),
                     limit=_int(params, "limit", PAGE_SIZE, 1, MAX_PAGE_SIZE))


def _ts(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def duration_s(started: str | None, finished: str | None, now: datetime) -> float | None:
    """Seconds from start to finish, or to `now` while it runs; None before it started."""
    t0 = _ts(started)
    if t0 is None:
        return None
    t1 = _ts(finished) or now
    try:
        return max(0.0, (t1 - t0).total_seconds())
    except TypeError:  # a naive timestamp beside an aware one: not worth a wrong figure
        return None


@dataclass(frozen=True)
class PhaseRow:
    name: str
    summary: str
    status: str
    started_at: str | None
    finished_at: str | None
    duration_s: float | None
    done: int
    total: int
    message: str
    offset_s: float | None  # its start, in seconds after the first phase's start (the timeline's x)


def timeline(phases: list[StatusPhase], now: datetime) -> list[PhaseRow]:
    starts = [t for p in phases if (t := _ts(p.started_at)) is not None]
    first = min(starts, default=None)
    return [PhaseRow(p.name, p.summary, p.status, p.started_at, p.finished_at,
                     duration_s(p.started_at, p.finished_at if p.status != PhaseStatus.RUNNING else None, now),
                     p.done, p.total, p.message,
                     None if first is None else duration_s(first.isoformat(), p.started_at, now) if p.started_at else None)
            for p in phases]


def cell_state(cmd: Mapping[str, Any] | None) -> str:
    """One grid cell: the node's command in that phase ("" when none was sent)."""
    if not cmd:
        return ""
    status = str(cmd.get("status") or "")
    return NodeStatus.RUNNING if status == CommandStatus.SENT else status


# Which install phase puts a component on a node (its command's state is the component's until
# a health round answers for it); first match wins. kube-proxy and the CNI are DaemonSets of the
# addons phase: no per-node command, only the health answer.
COMPONENT_PHASES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("containerd", ("node-env",)),
    ("kubelet", ("workers", "control-plane-join", "control-plane-init", "etcd", "node-env")),
    ("haproxy", ("load-balancer",)),
    ("keepalived", ("load-balancer",)),
    ("etcd*", ("etcd",)),
    ("kube-*", ("control-plane-init", "control-plane-join")),
)


# The components a node's health round checks (bke.core.node_steps.health_steps: the kubelet, each etcd
# member, the control-plane pods); the others have no check of their own to be Healthy by.
HEALTH_CHECKED = ("kubelet", "etcd*", "kube-apiserver", "kube-controller-manager", "kube-scheduler")


def component_cell(component: str, phase_cells: Mapping[str, str], health: Mapping[str, Any] | None) -> str:
    """One nodes x components cell: Unhealthy when the node's latest health round failed that
    component's check (`health:<component>`); Healthy when the component is installed and the
    round checked it and it passed; else the state of the command that installs it ("" when
    none was sent, or for a DaemonSet of the addons phase)."""
    phases = next((ph for pattern, ph in COMPONENT_PHASES if fnmatchcase(component, pattern)), ())
    installed = next((phase_cells[p] for p in phases if phase_cells.get(p)), "")
    answered = bool(health) and health.get("status") in tuple(HealthStatus)  # type: ignore[union-attr]
    if answered and f"health:{component}" in (health.get("failing") or []):  # type: ignore[union-attr]
        return HealthStatus.UNHEALTHY
    if answered and installed == CommandStatus.SUCCEEDED and any(fnmatchcase(component, c) for c in HEALTH_CHECKED):
        return HealthStatus.HEALTHY
    return installed


@dataclass(frozen=True)
class NodeRow:
    hostname: str
    status: str
    phase: str
    step: str
    cells: dict[str, str]  # phase slug -> cell_state
    components: dict[str, str] = field(default_factory=dict)  # component -> component_cell


@dataclass(frozen=True)
class NodePage:
    query: NodeQuery
    counts: dict[str, int]  # every node, by state
    matched: int  # nodes of the selected state
    columns: list[str]  # the phases that send commands to nodes (a grid column each)
    rows: list[NodeRow]
    failing: list[str]  # the first FAILING_SHOWN failed nodes, plan order
    component_columns: list[str] = field(default_factory=list)  # the components of this page's nodes

    @property
    def next_offset(self) -> int | None:
        end = self.query.offset + len(self.rows)
        return end if end < self.matched else None

    @property
    def prev_offset(self) -> int | None:
        return max(0, self.query.offset - self.query.limit) if self.query.offset > 0 else None


@dataclass(frozen=True)
class ClusterView:
    status: ClusterStatus  # the status contract's reply (no node rows: the page has its own)
    phases: list[PhaseRow]
    nodes: NodePage
    events: list[Event]

    def to_json(self) -> dict[str, Any]:
        s = self.status
        return {
            "cluster": s.cluster, "status": s.status, "requestId": s.request_id, "startedAt": s.started_at,
            "finishedAt": s.finished_at, "message": s.message, "kind": s.kind,
            "phases": [asdict(p) for p in self.phases],
            "nodes": {
                "counts": self.nodes.counts, "total": sum(self.nodes.counts.values()), "state": self.nodes.query.state,
                "matched": self.nodes.matched, "offset": self.nodes.query.offset, "limit": self.nodes.query.limit,
                "nextOffset": self.nodes.next_offset, "columns": self.nodes.columns,
                "componentColumns": self.nodes.component_columns,
                "rows": [asdict(r) for r in self.nodes.rows], "failing": self.nodes.failing,
            },
            "events": [e.to_json() for e in self.events],
        }


@dataclass(frozen=True)
class StepRecord:
    phase: str
    status: str  # cell_state of the command
    step: str  # the failing step's id
    output: str  # the step's stderr as the agent reported it
    at: str
    command_id: str


@dataclass(frozen=True)
class NodeDetail:
    cluster: str
    hostname: str
    status: str
    phase: str
    step: str
    components: list[str]
    commands: list[StepRecord]  # one per phase that sent this node a command, in pipeline order

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
