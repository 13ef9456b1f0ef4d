"""What the wiring of the dispatcher's operations is given by the service's (app.py): the
service, its stores and clients, its clock and identity. Each operation's `wire` takes what it
needs from here and registers itself: its store, its loop on a runner, its subscriber."""
from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from redis.asyncio import Redis

from bke.adapters.bus.handler import Out, typed
from bke.adapters.bus.service import Service
from bke.adapters.cluster_api.node_labels import NodeMarker
from bke.adapters.operation import Publish
from bke.adapters.state import PlanCache
from bke.adapters.state.command_signing import Sign
from bke.adapters.state.nodefiles import RedisNodeFiles
from bke.contracts.base import Message
from bke.core.plan import Plan

from ..ports import Checksums
from ..state import DispatcherState

__all__ = ["Deps"]

M = TypeVar("M", bound=Message)


@dataclass(frozen=True)
class Deps:
    svc: Service
    redis: Redis
    state: DispatcherState
    plans: PlanCache
    files: RedisNodeFiles
    checksums: Checksums
    marker: NodeMarker  # the new nodes' labels and taints (a join's last step)
    kubeconfig: Callable[[Plan], Awaitable[object]] | None  # admin.conf for a removal's drain; None: the lab's
    paused: Callable[[str], Awaitable[bool]]
    publish: Publish  # records what it publishes among the dashboard's recent events
    notify: Publish
    now: Callable[[], datetime]
    owner: str
    lease_ms: int
    sign: Sign
    batch_size: int
    agents_deadline_s: float

    def subscribe(self, subject: str, stream: str, durable: str, model: type[M],
                  handler: Callable[[M], Awaitable[Sequence[Out] | None]],
                  give_up: Callable[[bytes, str], Awaitable[None]] | None = None) -> None:
        """A durable subscriber that hands `handler` the parsed message and publishes its answers."""
        self.svc.work_subscriber(subject, stream, durable, typed(model, handler, self.publish, self.notify),
                                 batch_size=self.batch_size, give_up=give_up)
