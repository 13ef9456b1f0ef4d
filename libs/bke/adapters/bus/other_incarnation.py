"""Results that answer a command of another incarnation of their cluster: dropped and counted.

Why: a cluster deleted and made again under the same name reuses its command ids, and an agent
that has not yet taken a command of the new cluster still answers a replayed old command from
its journal (bke.core.secrets.binding says why it may). Such a result carries the incarnation of the
command it answers (`CommandResult.incarnation`); the dispatcher and the upgrader compare it
with the cluster's current one (plan-meta) and drop it, so that the new install never counts an
old answer under the same id. It is acknowledged, counted on the service's /metrics and logged
(rate-limited per cluster); nothing of it is recorded.

    bke_agent_results_other_incarnation_total{service}

A result without the field (an unbound command's, an agent of the previous release) is judged
by the other rules only (its command id, its node's accepted agent).
"""
from __future__ import annotations

import logging
from typing import Any

from bke.contracts.agent import CommandResult

__all__ = ["METRIC", "OtherIncarnation"]

log = logging.getLogger("bke.adapters.bus.other_incarnation")
METRIC = "bke_agent_results_other_incarnation"  # exposed as <name>_total


class OtherIncarnation:
    """One per service: its counter is registered once in the service's registry (`metrics`
    None: counted in `count` only, for a core used without a service)."""

    def __init__(self, metrics: Any | None, service: str) -> None:
        self.service, self.count = service, 0
        self._counter = None if metrics is None else metrics.counter(
            METRIC, "Agent results answering a command of another incarnation of their cluster: dropped uncounted",
            ["service"]).labels(service)

    def dropped(self, res: CommandResult, why: str, *, log_it: bool = True) -> None:
        """Count it; log it unless the caller logs its drops itself (`log_it` False)."""
        self.count += 1
        if self._counter is not None:
            self._counter.inc()
        if log_it:
            log.warning("result dropped: %s", why, extra={
                "cluster": res.cluster, "node": res.node, "command_id": res.command_id, "incarnation": res.incarnation,
                "rate_key": f"other-incarnation:{self.service}:{res.cluster}"})
