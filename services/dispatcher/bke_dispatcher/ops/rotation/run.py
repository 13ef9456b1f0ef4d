"""Certificate rotation, the adapters: the rotation's record in Redis, its handlers, and the
reconcile step the rotation runner calls. Decisions are `rotation`'s; this module reads,
writes and publishes around them.

    bke:<c>:rotation           string  the cluster's current (or last) rotation, JSON
    bke:<c>:rotation:results   hash    command id -> {status, step, stderr} as the agent answered
    bke:rotations              set     clusters with a rotation record (resumed after a restart)

Only the reconcile step (under the cluster's "rotation" lease) and the start (a WATCH
transaction that refuses if another rotation runs) write the record; results are recorded
beside it and folded in by the next reconcile, so a result that arrives twice counts once.

One operation per cluster: a rotation holds the cluster's operation slot
(bke.adapters.state.operation_slot) from the renewal that starts it (the certs service claims it) to its
end; an install, upgrade, restore or reset holding it refuses the rotation, named.

Errors (see bke.core.errors): a malformed `certs renewed` event is dead-lettered; a refused start
publishes `RotationChanged` Failed with the reason and is acked; anything else is redelivered.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from redis.asyncio import Redis

from bke.contracts.agent import AgentCommand, CommandResult, agent_subject
from bke.contracts.certs import CertsRenewed
from bke.contracts.rotation import RotationChanged, RotationView, rotation_subject
from bke.adapters.state import PlanCache
from bke.adapters.state.exclusive import write_unless
from bke.adapters.state.keys import rotation_key, rotation_results_key, rotations_index
from bke.adapters.state.operation_slot import claim_operation, release_operation
from bke.adapters.state.nodefiles import RedisNodeFiles

from ...leased import LeasedOperation
from ...engine import Outcome
from .decide import Rotation, apply_result, new_rotation, next_step, node_steps, refusal, rotation_slug
from bke.adapters.state.command_signing import Sign
from ...state import DispatcherState

__all__ = ["RotationStore", "Rotations"]

log = logging.getLogger("bke.dispatcher.rotation")
Publish = Callable[[bytes, str, dict[str, str]], Awaitable[None]]
LEASE = "rotation"
KIND = "rotation"  # its name in the cluster's operation slot (bke.adapters.state.operation_slot)
WAIT_S = 5.0  # re-check a node in flight this often even without a result (a restart, a lost kick)


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else v


class RotationStore:
    def __init__(self, redis: Redis):
        self.r = redis

    @staticmethod
    def _key(cluster: str) -> str:
        return rotation_key(cluster)

    async def load(self, cluster: str) -> Rotation | None:
        raw = await self.r.get(self._key(cluster))
        return None if raw is None else Rotation.from_json(raw)

    async def save(self, rot: Rotation) -> None:
        await self.r.set(self._key(rot.cluster), rot.to_json())

    async def start(self, rot: Rotation, check: Callable[[Rotation | None], str]) -> str:
        """Store `rot` unless `check(current)` refuses; the refusal ("" when stored). Atomic
        against another replica starting a rotation of the same cluster at the same time."""

        def write(pipe: Any) -> None:
            pipe.set(self._key(rot.cluster), rot.to_json())
            pipe.delete(rotation_results_key(rot.cluster))
            pipe.sadd(rotations_index(), rot.cluster)

        return await write_unless(self.r, self._key(rot.cluster),
                                  lambda raw: check(None if raw is None else Rotation.from_json(raw)), write)

    async def record_result(self, res: CommandResult, step: str, stderr: str) -> None:
        doc = json.dumps({"status": res.status, "step": step, "stderr": stderr})
        await self.r.hset(rotation_results_key(res.cluster), res.command_id, doc)

    async def results(self, cluster: str) -> dict[str, dict[str, str]]:
        raw = await self.r.hgetall(rotation_results_key(cluster))
        return {_s(k): json.loads(v) for k, v in raw.items()}

    async def clusters(self) -> list[str]:
        return sorted(_s(c) for c in await self.r.smembers(rotations_index()))

    async def rotation_view(self, cluster: str) -> dict | None:
        """The cluster's current or last rotation, as `RotationView` fields (camelCase), or None."""
        rot = await self.load(cluster)
        return None if rot is None else rot.view().model_dump(by_alias=True)


class Rotations(LeasedOperation):
    """Starts rotations on `certs renewed`, records results, and is the rotation runner's
    engine (`reconcile`)."""

    LEASE = LEASE  # the module's lease name (LeasedOperation)

    def __init__(self, store: RotationStore, state: DispatcherState, plans: PlanCache, files: RedisNodeFiles,
                 publish: Publish, now: Callable[[], datetime], owner: str, lease_ms: int = 15000,
                 kick: Callable[[str], None] | None = None, *, sign: Sign):
        self.sign = sign  # rotation commands are signed like every other (signing.py)
        self.store, self.state, self.plans, self.files, self.publish = store, state, plans, files, publish
        self.now, self.owner, self.lease_ms = now, owner, lease_ms
        self.kick: Callable[[str], None] = kick or (lambda cluster: None)

    def _ts(self) -> str:
        return self.now().isoformat()

    async def _changed(self, cluster: str, view: RotationView) -> None:
        ev = RotationChanged(cluster=cluster, at=self._ts(), rotation=view)
        await self.publish(ev.to_bytes(), rotation_subject(cluster), {})

    async def on_renewed(self, ev: CertsRenewed) -> None:
        ids = {"cluster": ev.cluster, "request_id": ev.request_id}
        if not ev.certificates:
            log.info("renewal renewed nothing: no rotation", extra=ids)
            return
        if ev.origin == "upgrade":  # the upgrader delivers these files in its own node steps
            return
        current = await self.store.load(ev.cluster)
        if current is not None and current.request_id == ev.request_id:
            self.kick(ev.cluster)  # a redelivery: that rotation exists already
            return
        plan = await self.plans.load(ev.cluster)
        try:
            rot = new_rotation(ev, plan, self._ts())
        except ValueError as exc:  # nodes the plan does not have: nothing can be delivered
            log.warning("rotation refused: %s", exc, extra=ids)
            await release_operation(self.store.r, ev.cluster, KIND, ev.request_id)  # its renewal's claim
            view = RotationView(request_id=ev.request_id, status="Failed", certificates=[c.instance for c in ev.certificates],
                                done=0, total=0, started_at=self._ts(), finished_at=self._ts(), message=str(exc), nodes=[])
            await self._changed(ev.cluster, view)
            return
        install = (await self.state.install(ev.cluster)).get("status")
        # one operation per cluster: the slot, claimed by the renewal that started this rotation
        # (bke_certs) and found again here; any other operation that holds it refuses it
        claim = await claim_operation(self.store.r, ev.cluster, KIND, ev.request_id, self._ts())
        why = claim.refusal(ev.cluster)
        if not why:
            why = await self.store.start(rot, lambda cur: refusal(ev.cluster, install, cur))
            if why:
                await release_operation(self.store.r, ev.cluster, KIND, ev.request_id)
        if why:
            log.warning("rotation refused: %s", why, extra=ids)
            rot.status, rot.message, rot.finished_at = "Failed", why, self._ts()
            if current is None or current.status != "Running":
                await self.store.save(rot)  # nothing runs: `bke status` shows the refusal
            await self._changed(ev.cluster, rot.view())
            return
        log.info("rotation started: %d certificate(s) on %d node(s)", len(rot.certificates), len(rot.nodes), extra=ids)
        await self._changed(ev.cluster, rot.view())
        self.kick(ev.cluster)

    async def _reconcile(self, cluster: str) -> Outcome:
        rot = await self.store.load(cluster)
        if rot is None or rot.status != "Running":
            if rot is not None:
                await release_operation(self.store.r, cluster, KIND, rot.request_id)
            return Outcome("done")
        # fold in what the agents answered since the last pass
        changed = False
        for cid, r in (await self.store.results(cluster)).items():
            changed |= apply_result(rot, cid, r["status"], r["step"], r["stderr"])
        decision = next_step(rot)
        ids = {"cluster": cluster, "request_id": rot.request_id, "node": decision.node}
        if decision.action == "send":
            run = next(n for n in rot.nodes if n.hostname == decision.node)
            try:
                await self._send(rot, decision.node)
                run.status = "Running"
            except ValueError as exc:  # the node's command cannot be built (e.g. no sealed file)
                run.status, run.step, run.stderr = "Failed", "prepare", str(exc)
                decision = next_step(rot)
            changed = True
        if decision.action in ("succeed", "fail"):
            rot.status = "Succeeded" if decision.action == "succeed" else "Failed"
            rot.message, rot.finished_at = decision.reason, self._ts()
            changed = True
            log.info("rotation %s %s", rot.status, decision.reason, extra=ids)
        if changed:
            await self.store.save(rot)
            if rot.status != "Running":  # ended: its slot goes before the end is announced
                await release_operation(self.store.r, cluster, KIND, rot.request_id)
            await self._changed(cluster, rot.view())
        if rot.status == "Failed":
            return Outcome("failed", reason=rot.message, node=decision.node or None)
        return Outcome("done") if rot.status == "Succeeded" else Outcome("wait", delay=WAIT_S)

    async def _send(self, rot: Rotation, hostname: str) -> None:
        plan = await self.plans.load(rot.cluster)
        node = next(n for n in plan.nodes if n.hostname == hostname)
        run = next(n for n in rot.nodes if n.hostname == hostname)
        files = await self.files.get(rot.cluster, "certs", hostname) or []
        cmd = await self.sign(AgentCommand(
            command_id=run.command_id, cluster=rot.cluster, node=hostname, phase=rotation_slug(rot.request_id),
            issued_at=self._ts(), steps=node_steps(plan, node, run, files),
        ))
        # publish before recording it as sent: a crash in between re-publishes the same id,
        # which JetStream drops and an agent that completed it only replays
        await self.publish(cmd.to_bytes(), agent_subject(rot.cluster, hostname, "command"), {"Nats-Msg-Id": cmd.command_id})
        log.info("rotation command sent", extra={"cluster": rot.cluster, "node": hostname, "request_id": rot.request_id})

    async def resume_all(self) -> list[str]:
        resumed = []
        for cluster in await self.store.clusters():
            rot = await self.store.load(cluster)
            if rot is not None and rot.status == "Running":
                self.kick(cluster)
                resumed.append(cluster)
            elif rot is not None:  # a crash between its end and its release heals here
                await release_operation(self.store.r, cluster, KIND, rot.request_id)
        return resumed

