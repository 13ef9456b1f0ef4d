"""Messages on an agent's subject whose payload names another node: dropped and counted.

Why: NATS permissions bind `bke.v1.agent.<cluster>.<node>.*` to that node's agent identity, so
the subject is what says who sent such a message; the payload says what its sender wrote. A
registration, refusal or result whose payload names another cluster or node than its subject is
one node's identity speaking for another (a compromised agent, another node's message published
again): it is acknowledged and dropped before its handler sees it, counted on the service's
/metrics, and logged with the cluster and node of both (rate-limited per cluster: a flood must
not flood the log). Nothing of it is recorded.

    bke_agent_messages_misaddressed_total{service, kind}   kind: the subject's last token
                                                           (registered, refused, result,
                                                           upgrader-result)

Every consumer of `bke.v1.agent.*.*.*` wraps its typed handler with `Misaddressed.guard`: the
certs service's registrations, the dispatcher's results and refusals. A handler called outside a delivery (a unit test) has no subject and is not
guarded.
"""
from __future__ import annotations

import logging
from typing import Any, Awaitable, Callable, Protocol, TypeVar

from bke.contracts.agent import subject_node
from .delivery import delivery_subject
from .flood import mark_stray

__all__ = ["METRIC", "Misaddressed", "misaddressed"]

log = logging.getLogger("bke.adapters.bus.misaddressed")
METRIC = "bke_agent_messages_misaddressed"  # exposed as <name>_total


class _Addressed(Protocol):
    @property
    def cluster(self) -> str: ...

    @property
    def node(self) -> str: ...


M = TypeVar("M", bound=_Addressed)


def misaddressed(subject: str, cluster: str, node: str) -> tuple[str, str] | None:
    """(cluster, node) of an agent subject whose payload names another `cluster` / `node`;
    None when they agree or the subject is no agent's."""
    where = subject_node(subject)
    return where if where is not None and where != (cluster, node) else None


class Misaddressed:
    """One per service: its counter is registered once in the service's registry."""

    def __init__(self, metrics: Any, service: str) -> None:
        self.service = service
        self.dropped = metrics.counter(METRIC, "Messages on an agent's subject whose payload names another cluster "
                                               "or node: dropped unhandled", ["service", "kind"])

    def guard(self, kind: str, handler: Callable[[M], Awaitable[Any]]) -> Callable[[M], Awaitable[Any]]:
        """`handler`, unless the delivery's subject names another node than the message."""
        counter = self.dropped.labels(self.service, kind)

        async def guarded(msg: M) -> Any:
            where = misaddressed(delivery_subject(), msg.cluster, msg.node)
            if where is None:
                return await handler(msg)
            counter.inc()
            mark_stray()  # counted towards the node's flood, where its consumer watches (bke.adapters.bus.flood)
            log.warning("%s dropped: published on the subject of %s in %s, its payload names %s in %s",
                        kind, where[1], where[0], msg.node, msg.cluster,
                        extra={"cluster": where[0], "node": where[1], "payload_cluster": msg.cluster,
                               "payload_node": msg.node, "kind": kind, "rate_key": f"misaddressed:{kind}:{where[0]}"})
            return []

        guarded.__name__ = getattr(handler, "__name__", "guarded")
        return guarded
