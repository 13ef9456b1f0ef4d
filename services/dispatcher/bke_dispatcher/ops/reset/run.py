"""Reset and delete, the adapters: the reset's record in Redis, its start on
`bke.v1.cluster.reset`, and its carriers on the one loop (bke.adapters.operation). Decisions are
`decide`'s.

    bke:<c>:reset           string  the cluster's current (or last) reset, JSON
    bke:<c>:reset:results   hash    command id -> {status, step, stderr} as the agent answered
    bke:resets              set     clusters with a reset record (resumed after a restart)

    snapshot   one `EtcdSnapshot` command per etcd cluster, on a member still there
    send       one `ResetNode` command per node of the rank

A reset holds the cluster's operation slot (bke.adapters.state.operation_slot, kind "reset" or
"delete") from its start to its end: any other operation running refuses it, named, and it
refuses any other. A delete that succeeded publishes `ClusterDeleted` (de-duplicated by its
request id) as its end; every service then removes its own records (bke.adapters.forgetting),
this one's reset record included.

Errors (see bke.core.errors): a malformed request is dead-lettered; a refused one is acked with
`ResetRejected` and the reason; anything else is redelivered.
"""
from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Protocol

from redis.asyncio import Redis

from bke.adapters.bus.handler import Out
from bke.adapters.operation import EndEvent, OperationLoop, Publish, RecordStore
from bke.adapters.state import PlanCache
from bke.adapters.state.command_signing import Sign
from bke.adapters.state.keys.dispatcher import reset_key, reset_results_key, resets_index
from bke.contracts.base import Message
from bke.contracts.reset import (
    CLUSTER_DELETED, RESET_ACCEPTED, RESET_REJECTED, ClusterDeleted, ResetAccepted, ResetChanged, ResetCluster,
    ResetRejected, reset_subject,
)
from bke.core.errors import TemporaryError
from bke.core.etcdsnap.step import snapshot_step
from bke.core.operation import Act, Decision, OperationStatus, RunStatus
from bke.core.plan import Plan

from ...state import DispatcherState
from ..rotation.run import RotationStore
from .decide import Reset, apply_result, new_reset, next_step, refusal, reset_slug, reset_step

__all__ = ["ResetStore", "Resets", "SnapshotKey", "slot_kind"]

log = logging.getLogger("bke.dispatcher.reset")


class SnapshotKey(Protocol):
    async def recipient(self) -> str:
        """The deployment's snapshot key (public, base64), the object store ensured."""


class ResetStore(RecordStore[Reset]):
    def __init__(self, redis: Redis):
        super().__init__(redis, Reset.from_json, reset_key, reset_results_key, resets_index())


def slot_kind(r: Reset) -> str:
    """The reset's name in the cluster's operation slot (bke.adapters.state.operation_slot)."""
    return "delete" if r.delete else "reset"


class Resets(OperationLoop[Reset]):
    """Starts resets on `bke.v1.cluster.reset`; its loop snapshots etcd, then resets a rank at a time."""

    def __init__(self, store: ResetStore, rotations: RotationStore, state: DispatcherState, plans: PlanCache,
                 paused: Callable[[str], Awaitable[bool]], snapshots: SnapshotKey, publish: Publish,
                 now: Callable[[], datetime], owner: str, lease_ms: int = 15000,
                 kick: Callable[[str], None] | None = None, *, sign: Sign):
        super().__init__(store, publish, now, owner, lease_ms, kick, sign=sign, kind="reset",
                         carriers={"snapshot": self._snapshots, "send": self._resets}, log=log,
                         decide=next_step, apply=apply_result)
        self.rotations, self.state, self.plans, self.paused, self.snapshots = rotations, state, plans, paused, snapshots

    def changed(self, rec: Reset, at: str) -> tuple[Message, str]:
        return ResetChanged(cluster=rec.cluster, at=at, reset=rec.view()), reset_subject(rec.cluster)

    def slot_kind(self, rec: Reset) -> str:
        return slot_kind(rec)

    def end_event(self, rec: Reset) -> EndEvent | None:
        """A delete that succeeded: every service removes its records (this one's reset record too)."""
        if rec.deleted_sent or not (rec.delete and rec.status == OperationStatus.SUCCEEDED):
            return None
        ev = ClusterDeleted(request_id=rec.request_id, cluster=rec.cluster)
        return EndEvent(ev, CLUSTER_DELETED, f"deleted:{rec.cluster}:{rec.request_id}")

    def end_sent(self, rec: Reset) -> None:
        rec.deleted_sent = True
        log.info("cluster deleted: every node reset; services remove their records",
                 extra={"cluster": rec.cluster, "request_id": rec.request_id})

    async def _plan(self, cluster: str) -> Plan | None:
        try:
            return await self.plans.load(cluster)
        except TemporaryError:  # no plan stored: nothing to reset (a deleted or unknown cluster)
            return None

    async def on_request(self, req: ResetCluster) -> list[Out]:
        ids = {"cluster": req.cluster, "request_id": req.request_id}
        current = await self.store.load(req.cluster)
        if current is not None and current.request_id == req.request_id:  # a redelivery
            self.kick(req.cluster)
            return [self._accepted(current)]
        plan = await self._plan(req.cluster)
        install = (await self.state.install(req.cluster)).get("status") if plan is not None else None
        paused = await self.paused(req.cluster)
        why = refusal(req, plan, install, paused=paused, current=current)
        if not why and plan is not None:
            # one operation per cluster: the slot is the one atomic step between kinds; the record's
            # own WATCH check stays for a reset left Running without a claim (before the slot existed)
            r = new_reset(req, plan, self._ts(), current.reset_before if current is not None else [])
            why = await self.begin(r, lambda cur: refusal(req, plan, install, paused=paused, current=cur))
        if why or plan is None:
            log.warning("reset refused: %s", why, extra=ids)
            return [Out(ResetRejected(request_id=req.request_id, cluster=req.cluster, message=why), RESET_REJECTED,
                        msg_id=f"reset-rejected:{req.request_id}")]
        log.info("reset started: %d node(s), delete=%s", len(r.nodes), r.delete, extra=ids)
        return [self._accepted(r)]

    @staticmethod
    def _accepted(r: Reset) -> Out:
        ev = ResetAccepted(request_id=r.request_id, cluster=r.cluster, nodes=[n.hostname for n in r.nodes],
                           delete=r.delete)
        return Out(ev, RESET_ACCEPTED, msg_id=f"reset-accepted:{r.request_id}")

    async def _snapshots(self, r: Reset, d: Act) -> Decision | None:
        """A snapshot of each etcd cluster named, on its member, sealed to the deployment's key."""
        plan = await self.plans.load(r.cluster)
        recipient = await self.snapshots.recipient()
        for snap in (s for s in r.snapshots if s.etcd_cluster in d.nodes):
            step = snapshot_step(plan, snap.etcd_cluster, snap.node, recipient, self.now(), request_id=r.request_id)
            await self.send_command(r.cluster, snap.node, snap.command_id, reset_slug(r.request_id), [step])
            snap.status, snap.snapshot_id = RunStatus.RUNNING, step.snapshot_id
        return None

    async def _resets(self, r: Reset, d: Act) -> Decision | None:
        for run in (n for n in r.nodes if n.hostname in d.nodes):
            await self.send_command(r.cluster, run.hostname, run.command_id, reset_slug(r.request_id),
                                    [reset_step(run, r.delete)])
            run.status = RunStatus.RUNNING
        return None
