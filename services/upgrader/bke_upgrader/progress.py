"""Where an upgrade stands, from its record alone (pure): each node's state and the share of
the work done, for the upgrader's /metrics and dashboard.

A node's state over the run's node steps (the local steps, pre-checks and addons, hold none):
    LeftOut      the request left it out (it is in no batch)
    Failed       it failed a step (RolledBack: its agent restored its old files)
    Upgraded     every step that holds it is past it
    Upgrading    it is in the batch in progress, or some of its steps are past it
    Pending      no step is past it yet
A step is past a node when the step Succeeded or was Skipped, or when the node's batch comes
before the step's current batch.

The ratio counts a node step's nodes (its `done`) and a local step as one unit each, so it
moves with every batch and reaches 1.0 exactly when the run Succeeded.
"""
from __future__ import annotations

from collections import Counter

from bke.contracts.statuses import NodeProgress, OperationStatus, RunStatus
from bke.core.upgrade.run import UpgradeRun

__all__ = ["NODE_STATES", "node_states", "progress_ratio"]

NODE_STATES = tuple(NodeProgress)
_PAST = (RunStatus.SUCCEEDED, RunStatus.SKIPPED)


def node_states(run: UpgradeRun) -> dict[str, int]:
    """How many nodes are in each state (every state present)."""
    held: Counter[str] = Counter()  # node -> steps that hold it
    past: Counter[str] = Counter()  # node -> steps past it
    busy: set[str] = set()
    for step in run.steps:
        if step.local:
            continue
        for i, batch in enumerate(step.batches):
            for host in batch:
                held[host] += 1
                if step.status in _PAST or i < step.batch:
                    past[host] += 1
                elif i == step.batch and step.status == RunStatus.RUNNING:
                    busy.add(host)
    states: Counter[str] = Counter({s: 0 for s in NODE_STATES})
    failed = {f.hostname: f.status for f in run.failed}
    for host in held:
        if host in failed:
            states[failed[host]] += 1
        elif run.status == OperationStatus.SUCCEEDED or past[host] == held[host]:
            states[NodeProgress.UPGRADED] += 1
        elif host in busy or past[host]:
            states[NodeProgress.UPGRADING] += 1
        else:
            states[NodeProgress.PENDING] += 1
    states[NodeProgress.LEFT_OUT] += len([h for h in run.left_out if h not in held])
    return dict(states)


def progress_ratio(run: UpgradeRun) -> float:
    if run.status == OperationStatus.SUCCEEDED:
        return 1.0
    units = done = 0
    for step in run.steps:
        if step.local:
            units += 1
            done += step.status in _PAST
        else:
            units += step.total
            done += step.total if step.status in _PAST else min(step.done, step.total)
    return done / units if units else 0.0
