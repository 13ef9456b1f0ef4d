"""Certificate rotation, the adapters: its record in Redis, its start on `certs renewed`, and its
carrier on the one loop (bke.adapters.operation). Decisions are `decide`'s.

    bke:<c>:rotation           string  the cluster's current (or last) rotation, JSON
    bke:<c>:rotation:results   hash    command id -> {status, step, stderr} as the agent answered
    bke:rotations              set     clusters with a rotation record (resumed after a restart)

    send   the node's command: its renewed files, the reloads they need, its health waited for

One operation per cluster: a rotation holds the cluster's operation slot
(bke.adapters.state.operation_slot) from the renewal that starts it (the certs service claims it) to its
end; an install, upgrade, restore or reset holding it refuses the rotation, named.

Errors (see bke.core.errors): a malformed `certs renewed` event is dead-lettered; a refused start
publishes `RotationChanged` Failed with the reason and is acked; anything else is redelivered.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from redis.asyncio import Redis

from bke.adapters.operation import OperationLoop, Publish, RecordStore
from bke.adapters.state import PlanCache
from bke.adapters.state.command_signing import Sign
from bke.adapters.state.keys.dispatcher import rotation_key, rotation_results_key, rotations_index
from bke.adapters.state.nodefiles import RedisNodeFiles
from bke.adapters.state.operation_slot import release_operation
from bke.contracts.base import Message
from bke.contracts.certs import CertsRenewed
from bke.contracts.rotation import RotationChanged, rotation_subject
from bke.core.operation import Act, Decision, OperationStatus, RunStatus

from ...state import DispatcherState
from .decide import Rotation, apply_result, new_rotation, next_step, node_steps, refusal, rotation_slug

__all__ = ["RotationStore", "Rotations"]

log = logging.getLogger("bke.dispatcher.rotation")
KIND = "rotation"  # its lease, and its name in the cluster's operation slot


class RotationStore(RecordStore[Rotation]):
    def __init__(self, redis: Redis):
        super().__init__(redis, Rotation.from_json, rotation_key, rotation_results_key, rotations_index())

    async def rotation_view(self, cluster: str) -> dict | None:
        """The cluster's current or last rotation, as `RotationView` fields (camelCase), or None."""
        rot = await self.load(cluster)
        return None if rot is None else rot.view().model_dump(by_alias=True)


class Rotations(OperationLoop[Rotation]):
    """Starts rotations on `certs renewed`; its loop sends one node's command at a time."""

    def __init__(self, store: RotationStore, state: DispatcherState, plans: PlanCache, files: RedisNodeFiles,
                 publish: Publish, now: Callable[[], datetime], owner: str, lease_ms: int = 15000,
                 kick: Callable[[str], None] | None = None, *, sign: Sign):
        super().__init__(store, publish, now, owner, lease_ms, kick, sign=sign, kind=KIND,
                         carriers={"send": self._send}, log=log, decide=next_step, apply=apply_result)
        self.state, self.plans, self.files = state, plans, files

    def changed(self, rec: Rotation, at: str) -> tuple[Message, str]:
        return RotationChanged(cluster=rec.cluster, at=at, rotation=rec.view()), rotation_subject(rec.cluster)

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
            await release_operation(self.store.redis, ev.cluster, KIND, ev.request_id)  # its renewal's claim
            gone = Rotation(request_id=ev.request_id, cluster=ev.cluster, started_at=self._ts(), nodes=[],
                            certificates=[c.instance for c in ev.certificates])
            gone.finish(OperationStatus.FAILED, str(exc), gone.started_at)
            await self.announce(gone)
            return
        install = (await self.state.install(ev.cluster)).get("status")
        # one operation per cluster: the slot, claimed by the renewal that started this rotation
        # (bke_certs) and found again here; any other operation that holds it refuses it
        why = await self.begin(rot, lambda cur: refusal(ev.cluster, install, cur))
        if why:
            log.warning("rotation refused: %s", why, extra=ids)
            rot.finish(OperationStatus.FAILED, why, self._ts())
            if current is None or not current.running:
                await self.store.write(rot)  # nothing runs: `bke status` shows the refusal
            await self.announce(rot)
            return
        log.info("rotation started: %d certificate(s) on %d node(s)", len(rot.certificates), len(rot.nodes), extra=ids)

    async def _send(self, rot: Rotation, d: Act) -> Decision | None:
        plan = await self.plans.load(rot.cluster)
        for run in (n for n in rot.nodes if n.hostname in d.nodes):
            node = next(n for n in plan.nodes if n.hostname == run.hostname)
            files = await self.files.get(rot.cluster, "certs", run.hostname) or []
            try:
                steps = node_steps(plan, node, run, files)
            except ValueError as exc:  # the node's command cannot be built (e.g. no sealed file)
                run.status, run.step, run.stderr = RunStatus.FAILED, "prepare", str(exc)
                continue
            await self.send_command(rot.cluster, run.hostname, run.command_id, rotation_slug(rot.request_id), steps)
            run.status = RunStatus.RUNNING
            log.info("rotation command sent", extra={"cluster": rot.cluster, "node": run.hostname,
                                                     "request_id": rot.request_id})
        return None
