"""The upgrader's domain figures on /metrics, read from its own run records when scraped:

    bke_upgrade_nodes{cluster,state}        nodes of the current (or last) upgrade by state
                                            (progress.NODE_STATES)
    bke_upgrade_progress_ratio{cluster}     its share of work done, 0..1
"""
from __future__ import annotations

from typing import Any

from .progress import node_states, progress_ratio
from .store import UpgradeStore

__all__ = ["UpgraderFigures", "watch_metrics"]


class UpgraderFigures:
    def __init__(self, metrics: Any, store: UpgradeStore):
        self.store = store
        self.nodes = metrics.gauge("bke_upgrade_nodes", "Nodes of the cluster's current or last upgrade by state",
                                   ["cluster", "state"])
        self.ratio = metrics.gauge("bke_upgrade_progress_ratio", "Share of the upgrade's work done (0..1)", ["cluster"])

    async def refresh(self) -> None:
        runs = [run for c in await self.store.clusters() if (run := await self.store.load(c)) is not None]
        self.nodes.clear()  # then set, with no await between: a removed cluster's series goes
        self.ratio.clear()
        for run in runs:
            for state, n in node_states(run).items():
                self.nodes.labels(run.cluster, state).set(n)
            self.ratio.labels(run.cluster).set(progress_ratio(run))


def watch_metrics(svc: Any, store: UpgradeStore) -> UpgraderFigures:
    figures = UpgraderFigures(svc.metrics, store)
    svc.metrics.refreshers.append(figures.refresh)
    return figures
