"""Reset and delete, the adapters: the reset's record in Redis, its handlers, and the reconcile
step the reset runner calls. Decisions are `reset`'s; this module reads, writes and publishes
around them (the shape of rotations.py).

    bke:<c>:reset           string  the cluster's current (or last) reset, JSON
    bke:<c>:reset:results   hash    command id -> {status, step, stderr} as the agent answered
    bke:resets              set     clusters with a reset record (resumed after a restart)

Only the reconcile step (under the cluster's "reset" lease) and the start (a WATCH transaction
that refuses if another reset runs) write the record; results are recorded beside it and
folded in by the next reconcile, so a result that arrives twice counts once. A reset holds the
cluster's operation slot (bke.adapters.state.operation_slot, kind "reset" or "delete") from its start to
its end: any other operation running refuses it, named, and it refuses any other. A delete that
succeeded publishes `ClusterDeleted` (de-duplicated by its request id); every service then
removes its own records (bke.adapters.forgetting), this one's reset record included.

Errors (see bke.core.errors): a malformed request is dead-lettered; a refused one is acked with
`ResetRejected` and the reason; anything else is redelivered.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, Protocol

from redis.asyncio import Redis

from bke.adapters.bus.handler import Out
from bke.contracts.agent import AgentCommand, CommandResult, agent_subject
from bke.contracts.reset import (
    CLUSTER_DELETED, RESET_ACCEPTED, RESET_REJECTED, ClusterDeleted, ResetAccepted, ResetChanged, ResetCluster,
    ResetRejected, reset_subject,
)
from bke.core.errors import TemporaryError
from bke.core.etcdsnap.step import snapshot_step
from bke.core.plan import Plan
from bke.adapters.state import PlanCache
from bke.adapters.state.exclusive import write_unless
from bke.adapters.state.keys import reset_key, reset_results_key, resets_index
from bke.adapters.state.operation_slot import release_operation, start_in_slot

from ...leased import LeasedOperation
from ...engine import Outcome
from .decide import Reset, apply_result, new_reset, next_step, refusal, reset_slug, reset_step
from ..rotation.run import RotationStore
from bke.adapters.state.command_signing import Sign
from ...state import DispatcherState

__all__ = ["ResetStore", "Resets", "SnapshotKey"]

log = logging.getLogger("bke.dispatcher.reset")
Publish = Callable[[bytes, str, dict[str, str]], Awaitable[None]]
LEASE = "reset"
WAIT_S = 5.0  # re-check commands in flight this often even without a result (a restart, a lost kick)


class SnapshotKey(Protocol):
    async def recipient(self) -> str:
        """The deployment's snapshot key (public, base64), the object store ensured."""


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else v


class ResetStore:
    def __init__(self, redis: Redis):
        self.r = redis

    async def load(self, cluster: str) -> Reset | None:
        raw = await self.r.get(reset_key(cluster))
        return None if raw is None else Reset.from_json(raw)

    async def save(self, r: Reset) -> bool:
        """Write the record unless it is gone (a delete's services removed it): False then."""
        return bool(await self.r.set(reset_key(r.cluster), r.to_json(), xx=True))

    async def start(self, r: Reset, check: Callable[[Reset | None], str]) -> str:
        def write(pipe: Any) -> None:
            pipe.set(reset_key(r.cluster), r.to_json())
            pipe.delete(reset_results_key(r.cluster))
            pipe.sadd(resets_index(), r.cluster)

        return await write_unless(self.r, reset_key(r.cluster),
                                  lambda raw: check(None if raw is None else Reset.from_json(raw)), write)

    async def record_result(self, res: CommandResult, step: str, stderr: str) -> None:
        doc = json.dumps({"status": res.status, "step": step, "stderr": stderr})
        await self.r.hset(reset_results_key(res.cluster), res.command_id, doc)

    async def results(self, cluster: str) -> dict[str, dict[str, str]]:
        raw = await self.r.hgetall(reset_results_key(cluster))
        return {_s(k): json.loads(v) for k, v in raw.items()}

    async def clusters(self) -> list[str]:
        return sorted(_s(c) for c in await self.r.smembers(resets_index()))


class Resets(LeasedOperation):
    """Starts resets on `bke.v1.cluster.reset`, records results, and is the reset runner's engine."""

    LEASE = LEASE  # the module's lease name (LeasedOperation)

    def __init__(self, store: ResetStore, rotations: RotationStore, state: DispatcherState, plans: PlanCache,
                 paused: Callable[[str], Awaitable[bool]], snapshots: SnapshotKey, publish: Publish,
                 now: Callable[[], datetime], owner: str, lease_ms: int = 15000,
                 kick: Callable[[str], None] | None = None, *, sign: Sign):
        self.store, self.rotations, self.state, self.plans = store, rotations, state, plans
        self.paused, self.snapshots, self.publish, self.sign = paused, snapshots, publish, sign
        self.now, self.owner, self.lease_ms = now, owner, lease_ms
        self.kick: Callable[[str], None] = kick or (lambda cluster: None)

    def _ts(self) -> str:
        return self.now().isoformat()

    async def _changed(self, r: Reset) -> None:
        ev = ResetChanged(cluster=r.cluster, at=self._ts(), reset=r.view())
        await self.publish(ev.to_bytes(), reset_subject(r.cluster), {})

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
        if why or plan is None:
            log.warning("reset refused: %s", why, extra=ids)
            return [Out(ResetRejected(request_id=req.request_id, cluster=req.cluster, message=why), RESET_REJECTED,
                        msg_id=f"reset-rejected:{req.request_id}")]
        r = new_reset(req, plan, self._ts(), current.reset_before if current is not None else [])
        # one operation per cluster: the slot is the one atomic step between kinds; the record's
        # own WATCH check stays for a reset left Running without a claim (before the slot existed)
        kind = slot_kind(r)
        why = await start_in_slot(self.store.r, req.cluster, kind, req.request_id, self._ts(),
                                  lambda: self.store.start(r, lambda cur: refusal(req, plan, install, paused=paused,
                                                                                  current=cur)))
        if why:
            log.warning("reset refused: %s", why, extra=ids)
            return [Out(ResetRejected(request_id=req.request_id, cluster=req.cluster, message=why), RESET_REJECTED,
                        msg_id=f"reset-rejected:{req.request_id}")]
        log.info("reset started: %d node(s), delete=%s", len(r.nodes), r.delete, extra=ids)
        await self._changed(r)
        self.kick(req.cluster)
        return [self._accepted(r)]

    @staticmethod
    def _accepted(r: Reset) -> Out:
        ev = ResetAccepted(request_id=r.request_id, cluster=r.cluster, nodes=[n.hostname for n in r.nodes],
                           delete=r.delete)
        return Out(ev, RESET_ACCEPTED, msg_id=f"reset-accepted:{r.request_id}")

    async def _reconcile(self, cluster: str) -> Outcome:
        r = await self.store.load(cluster)
        if r is None:
            return Outcome("done")
        # a delete that succeeded: every service removes its records (this one's reset record too)
        if r.status == "Succeeded" and r.delete and not r.deleted_sent:
            await self._deleted(r)
            return Outcome("done")
        if r.status != "Running":
            await release_operation(self.store.r, cluster, slot_kind(r), r.request_id)  # again: idempotent
            return Outcome("done")
        # fold in what the agents answered since the last pass
        changed = False
        for cid, res in (await self.store.results(cluster)).items():
            changed |= apply_result(r, cid, res["status"], res["step"], res["stderr"])
        decision = next_step(r)
        if decision.action in ("snapshot", "send"):
            plan = await self.plans.load(cluster)
            if decision.action == "snapshot":
                await self._send_snapshots(r, plan, decision.nodes)
            else:
                await self._send_resets(r, decision.nodes)
            changed = True
        if decision.action in ("succeed", "fail"):
            r.status = "Succeeded" if decision.action == "succeed" else "Failed"
            r.message, r.finished_at = decision.reason, self._ts()
            changed = True
            log.info("reset %s %s", r.status, decision.reason, extra={"cluster": cluster, "request_id": r.request_id})
        if changed:
            await self.store.save(r)
            if r.status != "Running":  # ended: its slot goes before the end is announced
                await release_operation(self.store.r, cluster, slot_kind(r), r.request_id)
            await self._changed(r)
        if r.status == "Succeeded" and r.delete:
            await self._deleted(r)
        if r.status == "Failed":
            return Outcome("failed", reason=r.message, node=decision.nodes[0] if decision.nodes else None)
        return Outcome("done") if r.status == "Succeeded" else Outcome("wait", delay=WAIT_S)

    async def _deleted(self, r: Reset) -> None:
        # publish first (de-duplicated by id), then mark it, unless the services removed the record already
        ev = ClusterDeleted(request_id=r.request_id, cluster=r.cluster)
        await self.publish(ev.to_bytes(), CLUSTER_DELETED, {"Nats-Msg-Id": f"deleted:{r.cluster}:{r.request_id}"})
        r.deleted_sent = True
        await self.store.save(r)
        log.info("cluster deleted: every node reset; services remove their records",
                 extra={"cluster": r.cluster, "request_id": r.request_id})

    async def _command(self, r: Reset, node: str, cid: str, steps: list[Any]) -> None:
        cmd = await self.sign(AgentCommand(command_id=cid, cluster=r.cluster, node=node, phase=reset_slug(r.request_id),
                                           issued_at=self._ts(), steps=steps))
        # publish before recording it as sent: a crash in between re-publishes the same id,
        # which JetStream drops and an agent that completed it only replays
        await self.publish(cmd.to_bytes(), agent_subject(r.cluster, node, "command"), {"Nats-Msg-Id": cid})

    async def _send_snapshots(self, r: Reset, plan: Plan, etcd_clusters: tuple[str, ...]) -> None:
        recipient = await self.snapshots.recipient()
        for snap in r.snapshots:
            if snap.etcd_cluster not in etcd_clusters:
                continue
            step = snapshot_step(plan, snap.etcd_cluster, snap.node, recipient, self.now(), request_id=r.request_id)
            await self._command(r, snap.node, snap.command_id, [step])
            snap.status, snap.snapshot_id = "Running", step.snapshot_id

    async def _send_resets(self, r: Reset, hosts: tuple[str, ...]) -> None:
        for run in r.nodes:
            if run.hostname in hosts:
                await self._command(r, run.hostname, run.command_id, [reset_step(run, r.delete)])
                run.status = "Running"

    async def resume_all(self) -> list[str]:
        resumed = []
        for cluster in await self.store.clusters():
            r = await self.store.load(cluster)
            if r is not None and (r.status == "Running" or (r.delete and r.status == "Succeeded" and not r.deleted_sent)):
                self.kick(cluster)
                resumed.append(cluster)
            elif r is not None:  # a crash between its end and its release heals here
                await release_operation(self.store.r, cluster, slot_kind(r), r.request_id)
        return resumed


def slot_kind(r: Reset) -> str:
    """The reset's name in the cluster's operation slot (bke.adapters.state.operation_slot)."""
    return "delete" if r.delete else "reset"
