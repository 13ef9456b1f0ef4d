"""The `node-labels` phase: every registered node gets the plan's labels and taints.

Real clusters: the Node objects are read through the API (pages of a list, not a GET per
node) and patched where they lack BKE's marks (`labels.node_patch`), in bounded batches
(`k8s_nodes.KubernetesNodes`). A node whose Node object is not there yet is waited for, up to
`REGISTER_TIMEOUT_S` from the first wait; then the phase fails naming the nodes.
The lab has no apiserver: each node's marks are recorded as applied would be ("Recorded",
bke.lab.standins.node_labels).
Shared by the dispatcher's install phase and the upgrader's run of a changed spec (its
`labels` step, bke.core.lifecycle.apply_run), which is why it lives in the library.

Either way the record per node lives in `bke:<cluster>:node-labels` (node -> labels, taints,
status, at). A node whose record matches the plan is not touched again: a re-run, a
redelivery or a restarted dispatcher picks up where the last stopped; a changed plan's
marks are applied again, removing only what BKE applied before.

    run() -> DONE                     every registered node carries its marks
          -> wait(reason, delay)      Node objects missing, or a patch raced another writer
          -> failed(reason)           the API refused a patch (4xx), or nodes never registered
    TemporaryError (raised)           the API is unreachable or answers 5xx: the runner retries
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable, Protocol

from redis.asyncio import Redis

from bke.core.plan import NodePlan, Plan
from bke.adapters.runner import DONE, Outcome
from bke.adapters.state.keys.dispatcher import node_labels_key, phase_key
from .labels import Marks, marks_from_record, record, wanted

__all__ = ["BATCH", "NodeLabelsWork", "NodeMarker", "NodesApplied", "REGISTER_TIMEOUT_S"]

log = logging.getLogger("bke.dispatcher.labels")
BATCH = 500  # nodes read and patched per round trip to the store (the API adapter bounds its own concurrency)
REGISTER_TIMEOUT_S = 600.0  # a kubelet registers within seconds of its credentials; 10 minutes is generous
WAITING_SINCE = "waitingSince"  # a field of the phase's own record: when the wait for Node objects began


@dataclass
class NodesApplied:
    """What one batch came to: node -> how its marks got there, nodes with no Node object yet,
    nodes whose patch raced another writer (409: read again next round)."""

    applied: dict[str, str] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)


class NodeMarker(Protocol):
    async def mark(self, plan: Plan, batch: list[tuple[NodePlan, Marks, Marks | None]]) -> NodesApplied: ...


def _text(v: bytes | str) -> str:
    return v.decode() if isinstance(v, bytes) else v


def _names(nodes: list[str], most: int = 10) -> str:
    return ", ".join(nodes[:most]) + (f" and {len(nodes) - most} more" if len(nodes) > most else "")


class NodeLabelsWork:
    def __init__(self, redis: Redis, marker: NodeMarker, now: Callable[[], datetime],
                 register_timeout_s: float = REGISTER_TIMEOUT_S):
        self.redis, self.marker, self.now, self.register_timeout_s = redis, marker, now, register_timeout_s

    async def run(self, name: str, plan: Plan) -> Outcome:
        key = node_labels_key(plan.cluster)
        stored = {_text(k): json.loads(v) for k, v in (await self.redis.hgetall(key)).items()}
        todo = []
        for node in plan.nodes:
            if not node.registers:
                continue  # etcd-only nodes: a standalone kubelet, no Node object
            want, before = wanted(node), marks_from_record(stored.get(node.hostname))
            if before != want:
                todo.append((node, want, before))
        registered = sum(1 for n in plan.nodes if n.registers)
        missing: list[str] = []
        conflicts: list[str] = []
        for i in range(0, len(todo), BATCH):
            batch = todo[i : i + BATCH]
            try:
                got = await self.marker.mark(plan, batch)
            except ValueError as exc:  # the API refused a patch: the input is wrong, retrying will not help
                return Outcome("failed", reason=f"node labels: {exc}")
            at = self.now().isoformat()
            marks = {node.hostname: want for node, want, _ in batch}
            if got.applied:
                await self.redis.hset(key, mapping={h: json.dumps(record(marks[h], how, at)) for h, how in got.applied.items()})
            missing += got.missing
            conflicts += got.conflicts
        if missing:
            return await self._wait_for_nodes(plan, name, registered, sorted(missing))
        await self.redis.hdel(phase_key(plan.cluster, name), WAITING_SINCE)
        if conflicts:
            return Outcome("wait", delay=1.0, reason=f"{len(conflicts)} Node(s) changed while being labelled: {_names(sorted(conflicts))}")
        if todo:
            log.info("node labels applied", extra={"cluster": plan.cluster, "nodes": len(todo)})
        return DONE

    async def _wait_for_nodes(self, plan: Plan, name: str, registered: int, missing: list[str]) -> Outcome:
        """Wait for Node objects, from the first wait on (kept in the phase's record, so that a
        restarted dispatcher keeps the same deadline and a `bke retry` starts a new one)."""
        now = self.now()
        pkey = phase_key(plan.cluster, name)
        await self.redis.hsetnx(pkey, WAITING_SINCE, now.isoformat())
        since = datetime.fromisoformat(_text(await self.redis.hget(pkey, WAITING_SINCE) or now.isoformat()))
        waited = (now - since).total_seconds()
        if waited > self.register_timeout_s:
            await self.redis.hdel(pkey, WAITING_SINCE)
            return Outcome("failed", node=missing[0], reason=(
                f"{len(missing)} node(s) never registered within {self.register_timeout_s:g}s: {_names(missing)} "
                "(no Node object: see the kubelet's log on those nodes)"))
        return Outcome("wait", delay=5.0, reason=(
            f"{registered - len(missing)}/{registered} nodes labelled; waiting for the Node objects of {_names(missing)}"))
