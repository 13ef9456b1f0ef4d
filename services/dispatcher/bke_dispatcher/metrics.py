"""The dispatcher's domain figures on /metrics, read from its own records when scraped.

    bke_clusters{state}                  installs by status (Pending, Running, Succeeded, Failed)
    bke_phases{cluster,state}            each install's phases by status
    bke_commands_in_flight{cluster}      nodes whose current command was sent and not answered
    bke_nodes{cluster,state}             the plan's nodes by status, as `bke status` counts them

`cluster_figures` is the pure core (records in, figures out, with the status contract's
defaults: no record is Pending); `DispatcherFigures.refresh` reads every install in one
pipelined round trip per cluster (the install hash, each phase's status, the node records
counted by status in Redis: never the per-node command hashes, one per phase) and the plan from the
dispatcher's plan cache (re-read only when its digest changes), then replaces the gauges' series
so that a removed cluster disappears.

A node is "in flight" while its node record says Running: the install writes Running when it
records a sent command and the result's status when one is counted (state.py), so this is the
number of commands awaiting an answer; a node waiting for a retry reads Failed until it is sent
again.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis

from bke.core.errors import TemporaryError
from bke.adapters.state import PlanCache
from bke.adapters.state.keys.dispatcher import install_key, installs_index, node_status_key, phase_key
from bke.contracts.statuses import InstallStatus, NodeStatus, PhaseStatus

from .phases import PHASES

__all__ = ["CLUSTER_STATES", "ClusterFigures", "DispatcherFigures", "cluster_figures", "watch_metrics"]

CLUSTER_STATES = tuple(InstallStatus)
NODE_STATES = tuple(NodeStatus)
_SLUGS = tuple(p.slug for p in PHASES)
# The node hash's records counted by status inside Redis: a scrape then moves a few numbers,
# not the 10,000 records (600 KB, most of a scrape's time when read and parsed here); Redis
# spends a few milliseconds on it. Both writers' spellings match: json.dumps ("status": "X")
# and the finish script's cjson ("status":"X").
_COUNT_NODES = """
local counts = {}
for _, doc in ipairs(redis.call('HVALS', KEYS[1])) do
  local s = string.match(doc, '"status":%s*"(%w+)"') or 'Unknown'
  counts[s] = (counts[s] or 0) + 1
end
local out = {}
for s, n in pairs(counts) do out[#out + 1] = s; out[#out + 1] = n end
return out
"""


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else v


@dataclass(frozen=True)
class ClusterFigures:
    cluster: str
    status: str
    phases: dict[str, int] = field(default_factory=dict)  # phase status -> how many
    nodes: dict[str, int] = field(default_factory=dict)  # node status -> how many
    in_flight: int = 0


def cluster_figures(cluster: str, install: dict[str, str], phase_statuses: list[str | None],
                    node_counts: dict[str, int], total_nodes: int | None) -> ClusterFigures:
    """Figures of one install. `phase_statuses`: each phase's stored status (None: no record);
    `node_counts`: the node hash's records by status (`_COUNT_NODES`); `total_nodes`: the plan's
    node count (None: the plan is not readable yet, so only the recorded nodes count)."""
    phases = Counter(s or PhaseStatus.PENDING for s in phase_statuses)
    nodes = Counter(node_counts)
    recorded = sum(nodes.values())
    if total_nodes is not None and total_nodes > recorded:
        nodes[NodeStatus.PENDING] += total_nodes - recorded  # planned nodes no command reached yet
    for state in NODE_STATES:
        nodes.setdefault(state, 0)
    return ClusterFigures(cluster, install.get("status") or InstallStatus.PENDING, dict(phases), dict(nodes),
                          nodes[NodeStatus.RUNNING])


class DispatcherFigures:
    def __init__(self, metrics: Any, redis: Redis, plans: PlanCache):
        self.redis, self.plans = redis, plans
        self.clusters = metrics.gauge("bke_clusters", "Installs by status", ["state"])
        self.phases = metrics.gauge("bke_phases", "Install phases by status, per cluster", ["cluster", "state"])
        self.in_flight = metrics.gauge("bke_commands_in_flight", "Commands sent and not answered yet, per cluster",
                                       ["cluster"])
        self.nodes = metrics.gauge("bke_nodes", "The plan's nodes by install status, per cluster", ["cluster", "state"])

    async def read(self) -> list[ClusterFigures]:
        out = []
        for cluster in sorted(_s(c) for c in await self.redis.smembers(installs_index())):
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.hgetall(install_key(cluster))
                for slug in _SLUGS:
                    pipe.hget(phase_key(cluster, slug), "status")
                pipe.eval(_COUNT_NODES, 1, node_status_key(cluster))
                got = await pipe.execute()
            install = {_s(k): _s(v) for k, v in got[0].items()}
            if not install:
                continue  # indexed, then reset by a replaced plan: no install to count
            try:
                total: int | None = len((await self.plans.load(cluster)).nodes)
            except TemporaryError:
                total = None  # the install record came before the plan is visible
            flat = got[-1]
            counts = {_s(flat[i]): int(flat[i + 1]) for i in range(0, len(flat), 2)}
            out.append(cluster_figures(cluster, install, [None if s is None else _s(s) for s in got[1:-1]],
                                       counts, total))
        return out

    def publish(self, figures: list[ClusterFigures]) -> None:
        """Replace every series at once (no await in here: a concurrent scrape sees all or none)."""
        for gauge in (self.clusters, self.phases, self.in_flight, self.nodes):
            gauge.clear()
        by_state = Counter(f.status for f in figures)
        for state in sorted(set(CLUSTER_STATES) | set(by_state)):
            self.clusters.labels(state).set(by_state[state])
        for f in figures:
            for state, n in f.phases.items():
                self.phases.labels(f.cluster, state).set(n)
            for state, n in f.nodes.items():
                self.nodes.labels(f.cluster, state).set(n)
            self.in_flight.labels(f.cluster).set(f.in_flight)

    async def refresh(self) -> None:
        self.publish(await self.read())


def watch_metrics(svc: Any, redis: Redis, plans: PlanCache) -> DispatcherFigures:
    """Register the dispatcher's figures with its /metrics (one line in app.py)."""
    figures = DispatcherFigures(svc.metrics, redis, plans)
    svc.metrics.refreshers.append(figures.refresh)
    return figures
