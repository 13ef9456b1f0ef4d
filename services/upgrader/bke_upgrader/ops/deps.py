"""What the wiring of the upgrader's operations is given by the service's (app.py): the service,
its Redis, the upgrade's store, the plans, the node commands' way to the dispatcher, the run settings and the
deployment's snapshot key. Each operation's `wire` takes what it needs from here and registers
itself: its store, its loop on a runner, its subscribers and responders."""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from redis.asyncio import Redis

from bke.adapters.bus.handler import Out
from bke.adapters.bus.service import Service
from bke.adapters.state import PlanCache
from bke.adapters.bus.node_commands import SendCommands
from bke.core.secrets.snapshot_key import SnapshotKey

from ..ports import RunSettings
from ..store import UpgradeStore

__all__ = ["GET_QUEUE", "Deps"]

GET_QUEUE = "upgrader-get"  # the replicas share the status requests (upgrade.get, etcd-restore.get)


@dataclass(frozen=True)
class Deps:
    svc: Service
    redis: Redis
    store: UpgradeStore  # the upgrade's: its results' trust rule and its count of other incarnations' answers
    plans: PlanCache
    send: SendCommands  # node commands, through the dispatcher (bke.contracts.node_commands)
    settings: RunSettings
    snapshot_key: Callable[[], Awaitable[SnapshotKey]]  # the private half, made at first use

    def serve_bytes(self, subject: str, stream: str, durable: str, handle: Callable[[bytes], Awaitable[list[Out]]],
                    batch_size: int) -> None:
        """A durable subscriber whose handler reads the request's bytes itself (a rejection names
        each wrong field): what it answers, published."""
        svc = self.svc

        async def work(body: bytes) -> None:
            for out in await handle(body):
                await svc.publish(out.message.to_bytes(), out.subject,
                                  {"Nats-Msg-Id": out.msg_id} if out.msg_id else {})

        svc.work_subscriber(subject, stream, durable, work, batch_size=batch_size)
