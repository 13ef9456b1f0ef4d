"""Wiring of the join and removal of workers (joins.py, removals.py): their stores, runners and
subscribers, and which other operation holds a cluster. No logic beyond that."""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from redis.asyncio import Redis

from bke.adapters.bus.handler import typed
from bke.contracts.membership import JOIN_NODES, REMOVE_NODES, JoinNodes, RemoveNodes
from bke.adapters.drain import Drainer, KubernetesDrainer
from bke.lab.standins.drain import LabDrainer
from bke.adapters.state.operation_slot import operation_holder
from bke.adapters.state import PlanCache
from bke.adapters.state.keys import (
    join_key, join_results_key, joins_index, removal_api_key, removal_key, removal_results_key, removals_index,
)
from bke.adapters.state.nodefiles import RedisNodeFiles

from ...engine import Checksums
from ..join.decide import AGENTS_DEADLINE_S, Join
from ..join.run import Joins
from .give_up import answer_given_up
from .gates import Busy, OperationStore
from bke.adapters.cluster_api.node_labels import NodeMarker
from ..removal.decide import Removal
from ..removal.run import Removals
from ..rotation.run import RotationStore
from bke.adapters.runner import Runner
from bke.adapters.state.command_signing import Sign
from ...state import DispatcherState

__all__ = ["Membership", "wire_membership"]


@dataclass
class Membership:
    joins: Joins
    removals: Removals
    join_runner: Runner
    removal_runner: Runner

    async def resume_all(self) -> list[str]:
        return await self.joins.resume_all() + await self.removals.resume_all()

    async def stop(self) -> None:
        await self.join_runner.stop()
        await self.removal_runner.stop()

    def kick(self, cluster: str) -> None:
        """A sealed bundle or an accepted agent may be what a join waits for."""
        self.join_runner.kick(cluster)


def busy_reader(redis: Redis, rotations: RotationStore, join_store: OperationStore[Join],
                removal_store: OperationStore[Removal]) -> Callable[[str], Awaitable[Busy | None]]:
    """Another operation that holds the cluster (one at a time), or None: the cluster's
    operation slot (every kind claims it; a join's and a removal's own claim is the atomic
    step), then the records that may run without a claim (written before the slot existed)."""

    async def busy(cluster: str) -> Busy | None:
        holder = await operation_holder(redis, cluster)
        if holder is not None and holder.kind not in ("join", "removal"):
            return Busy(holder.kind, holder.request_id)
        for what, running in (("rotation", await rotations.load(cluster)),
                              ("join", await join_store.load(cluster)),
                              ("removal", await removal_store.load(cluster))):
            if running is not None and running.status == "Running":
                return Busy(what, running.request_id)
        return None

    return busy


def wire_membership(svc: Any, redis: Redis, state: DispatcherState, plans: PlanCache, files: RedisNodeFiles,
                    checksums: Checksums, marker: NodeMarker, kubeconfig: Callable[[Any], Awaitable[Any]] | None,
                    rotations: RotationStore, paused: Callable[[str], Awaitable[bool]], publish: Any, notify: Any,
                    now: Callable[[], datetime], owner: str, lease_ms: int, sign: Sign, batch_size: int, *,
                    agents_deadline_s: float = AGENTS_DEADLINE_S) -> Membership:
    join_store: OperationStore[Join] = OperationStore(redis, Join.from_json, join_key, join_results_key, joins_index())
    removal_store: OperationStore[Removal] = OperationStore(redis, Removal.from_json, removal_key, removal_results_key,
                                                            removals_index())

    busy = busy_reader(redis, rotations, join_store, removal_store)

    async def busy_for_join(cluster: str) -> Busy | None:
        other = await busy(cluster)
        return None if other is not None and other.kind == "join" else other  # its own kind: join_refusal says

    async def busy_for_removal(cluster: str) -> Busy | None:
        other = await busy(cluster)
        return None if other is not None and other.kind == "removal" else other

    drainer: Drainer = (LabDrainer(redis, now, removal_api_key) if kubeconfig is None else KubernetesDrainer(kubeconfig))
    joins = Joins(join_store, state, plans, files, checksums, marker, busy_for_join, paused, publish, now, owner, lease_ms,
                  sign=sign, agents_deadline_s=agents_deadline_s)
    removals = Removals(removal_store, state, plans, drainer, busy_for_removal, paused, publish, now, owner, lease_ms,
                        sign=sign)
    # not held by a pause: neither starts on a paused cluster (refused), and one that runs finishes
    join_runner = Runner(joins, state)  # type: ignore[arg-type]  # same reconcile shape
    removal_runner = Runner(removals, state)  # type: ignore[arg-type]
    joins.kick, removals.kick = join_runner.kick, removal_runner.kick

    def t(model: Any, handler: Any) -> Any:
        return typed(model, handler, publish, notify)

    # a request that fails on every delivery is answered Failed, not left to its caller's timeout
    join_gave_up = answer_given_up("join", join_store, redis, publish, now, join_runner.kick)
    removal_gave_up = answer_given_up("removal", removal_store, redis, publish, now, removal_runner.kick)
    svc.work_subscriber(JOIN_NODES, "BKE_COMMANDS", "dispatcher-joins", t(JoinNodes, joins.on_request), batch_size=batch_size,
                        give_up=join_gave_up)
    svc.work_subscriber(REMOVE_NODES, "BKE_COMMANDS", "dispatcher-removals", t(RemoveNodes, removals.on_request),
                        batch_size=batch_size, give_up=removal_gave_up)
    return Membership(joins, removals, join_runner, removal_runner)
