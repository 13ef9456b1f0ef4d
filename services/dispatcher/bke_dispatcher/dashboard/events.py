"""The latest events of each cluster, for the dashboard: the transitions this dispatcher
publishes (a phase changed, an install finished, a node failed a step), kept in memory and
bounded, because the dispatcher keeps no event history of its own (the stream is the history,
and reading it back per page view would be a consumer per request).

`RecentEvents.watch(publish)` returns the same publish function with a look at each message on
an install subject; everything else (commands to agents, the bulk of the traffic) passes with
one string test. Per replica and lost on restart: a page shows what this process published.
"""
from __future__ import annotations

import json
from collections import OrderedDict, deque
from dataclasses import asdict, dataclass
from typing import Any

from bke.adapters.bus.handler import Publish
from bke.contracts.statuses import OperationStatus

__all__ = ["EVENTS_PER_CLUSTER", "CLUSTERS_KEPT", "Event", "RecentEvents"]

EVENTS_PER_CLUSTER = 100
CLUSTERS_KEPT = 200  # the least recently active cluster's list goes first beyond this
_PREFIX = "bke.v1.install."


@dataclass(frozen=True)
class Event:
    at: str
    kind: str  # phase | finished | node
    phase: str
    status: str
    node: str = ""
    step: str = ""
    message: str = ""  # a phase's or install's message, a failed node's stderr (cut)

    def to_json(self) -> dict[str, str]:
        return asdict(self)


def _event(kind: str, doc: dict[str, Any]) -> Event | None:
    """The event worth showing from one published install message, or None."""
    if kind == "phase":
        return Event(at=str(doc.get("at", "")), kind="phase", phase=str(doc.get("phase", "")),
                     status=str(doc.get("status", "")), message=str(doc.get("message") or "")[:500])
    if kind == "finished":
        return Event(at=str(doc.get("at", "")), kind="finished", phase=str(doc.get("phase") or ""),
                     status=str(doc.get("status", "")), node=str(doc.get("node") or ""),
                     message=str(doc.get("message") or "")[:500])
    if kind == "node" and doc.get("status") == OperationStatus.FAILED:  # thousands of Running/Succeeded would bury the rest
        return Event(at=str(doc.get("at", "")), kind="node", phase=str(doc.get("phase", "")), status=OperationStatus.FAILED,
                     node=str(doc.get("node", "")), step=str(doc.get("step") or ""),
                     message=str(doc.get("stderr") or "")[:500])
    return None


class RecentEvents:
    def __init__(self, per_cluster: int = EVENTS_PER_CLUSTER, clusters: int = CLUSTERS_KEPT):
        self.per_cluster, self.clusters = per_cluster, clusters
        self._by_cluster: OrderedDict[str, deque[Event]] = OrderedDict()

    def record(self, subject: str, body: bytes) -> None:
        """Keep the event in `body` if `subject` is an install subject (bke.v1.install.<c>.<kind>)."""
        if not subject.startswith(_PREFIX):
            return
        cluster, _, kind = subject[len(_PREFIX):].rpartition(".")
        if not cluster:
            return
        try:
            doc = json.loads(body)
        except ValueError:
            return
        ev = _event(kind, doc) if isinstance(doc, dict) else None
        if ev is None:
            return
        events = self._by_cluster.pop(cluster, None) or deque(maxlen=self.per_cluster)
        events.append(ev)
        self._by_cluster[cluster] = events  # most recently active last
        while len(self._by_cluster) > self.clusters:
            self._by_cluster.popitem(last=False)

    def latest(self, cluster: str, limit: int = 30) -> list[Event]:
        """Newest first."""
        events = self._by_cluster.get(cluster) or ()
        return list(reversed(events))[:limit]

    def watch(self, publish: Publish) -> Publish:
        """`publish` that also records what it published (after it was published: a failed
        publish is not an event anyone saw)."""
        async def publishing(data: bytes, subject: str, headers: dict[str, str]) -> None:
            await publish(data, subject, headers)
            self.record(subject, data)

        return publishing
