"""Removing workers, the adapters: the removal's record in Redis, its start, and its carriers on
the one loop (bke.adapters.operation). Decisions are `decide`'s.

    bke:<c>:removal           string  the cluster's current (or last) removal, JSON
    bke:<c>:removal:results   hash    command id -> the agent's answer to its reset
    bke:removals              set     clusters with a removal record (resumed after a restart)

    drain / delete-node  through the API with admin.conf (bke.adapters.drain.KubernetesDrainer); the lab
                         records both in `bke:<c>:removal:api` (bke.lab.standins.drain.LabDrainer)
    reset                one signed `ResetNode` command per node, fixed id
                         `<cluster>/remove@<rid>/<node>/0`
    forget               the dispatcher's own per-node records deleted (`forget_nodes`)

At the end `remove-nodes.finished` names the agents' bus identities: revoking one needs the
NATS authority (an operator key and the system account), which no service holds, so the
caller revokes them (the lab does at once, as `bke delete` does).

Errors (see bke.core.errors): a malformed request is dead-lettered; a refused one is answered with
`remove-nodes.finished` Failed and acked; a request that fails on every delivery is answered
the same way once dead-lettered (ops.membership.give_up); a drain that times out or an API that
refuses (4xx) fails the node's stage; an API or Redis that is away is retried by the runner.
The certs service forgets a removed node's keys on `finished` (bke_certs.removed_nodes).
"""
from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime

from redis.asyncio import Redis

from bke.adapters.auth.permissions import identity_name
from bke.adapters.bus.handler import Out
from bke.adapters.drain import Drainer
from bke.adapters.operation import EndEvent, Publish, RecordStore
from bke.adapters.state import PlanCache
from bke.adapters.state.command_signing import Sign
from bke.adapters.state.keys.dispatcher import (
    accepted_agents_key, command_key, health_key, heartbeat_cgroup_key, heartbeat_key, node_labels_key,
    node_status_key, removal_key, removal_results_key, removals_index, sealed_key,
)
from bke.contracts.agent_steps import ResetNode
from bke.contracts.base import Message
from bke.contracts.statuses import FinishedStatus
from bke.contracts.membership import (
    REMOVE_NODES_FINISHED, RemoveNodes, RemoveNodesChanged, RemoveNodesFinished, remove_changed_subject,
)
from bke.core.operation import Act, Decision, RunStatus

from ...phases import PHASES
from ...state import DispatcherState
from ..membership.gates import Busy, Gates, Judged, MembershipLoop, end_fields
from .decide import (
    Removal, advance, apply_result, drain_options, fail_stage, new_removal, next_step, removal_refusal,
)

__all__ = ["DRAIN_TIMEOUT_S", "RemovalStore", "Removals", "forget_nodes"]

log = logging.getLogger("bke.dispatcher.removal")
DRAIN_TIMEOUT_S = 600.0  # kubectl drain has none by default; a PodDisruptionBudget that never allows fails the node


async def forget_nodes(state: DispatcherState, cluster: str, hosts: list[str]) -> None:
    """The dispatcher's own records of these nodes, gone: results and heartbeats from their agents
    are no longer believed (no accepted agent), and no status row or label record remains."""
    r = state.r
    async with r.pipeline(transaction=True) as pipe:
        for key in (accepted_agents_key(cluster), heartbeat_key(cluster), heartbeat_cgroup_key(cluster),
                    node_status_key(cluster), node_labels_key(cluster), health_key(cluster),
                    *(command_key(cluster, p.slug) for p in PHASES)):
            pipe.hdel(key, *hosts)
        pipe.srem(sealed_key(cluster), *hosts)
        await pipe.execute()


class RemovalStore(RecordStore[Removal]):
    def __init__(self, redis: Redis):
        super().__init__(redis, Removal.from_json, removal_key, removal_results_key, removals_index())


class Removals(MembershipLoop[Removal, RemoveNodes]):
    def __init__(self, store: RemovalStore, state: DispatcherState, plans: PlanCache, drainer: Drainer,
                 busy: Callable[[str], Awaitable[Busy | None]], paused: Callable[[str], Awaitable[bool]], publish: Publish,
                 now: Callable[[], datetime], owner: str, lease_ms: int = 15000,
                 kick: Callable[[str], None] | None = None, *, sign: Sign, drain_timeout_s: float = DRAIN_TIMEOUT_S):
        carriers = {"drain": self._drain, "delete-node": self._delete_nodes, "reset": self._resets,
                    "forget": self._forget}
        super().__init__(store, publish, now, owner, lease_ms, kick, sign=sign, kind="removal",
                         carriers=carriers, log=log, decide=next_step, apply=apply_result)
        self.state, self.plans, self.drainer = state, plans, drainer
        self.busy, self.paused, self.drain_timeout_s = busy, paused, drain_timeout_s

    # the loop's hooks ---------------------------------------------------------------------
    def changed(self, rec: Removal, at: str) -> tuple[Message, str]:
        return RemoveNodesChanged(cluster=rec.cluster, at=at, removal=rec.view()), remove_changed_subject(rec.cluster)

    def finished_event(self, rec: Removal) -> EndEvent:
        forgotten = [i for i, n in zip(rec.identities, rec.nodes) if n.stage in ("forget", "done")]
        ev = RemoveNodesFinished(**end_fields(rec), nodes=rec.node_views(), revoke_identities=forgotten)
        return EndEvent(ev, REMOVE_NODES_FINISHED, f"remove-finished:{rec.cluster}:{rec.request_id}")

    # requests -------------------------------------------------------------------------------
    async def judged(self, req: RemoveNodes, gates: Gates) -> Judged[Removal]:
        def check(cur: Removal | None) -> str:
            return removal_refusal(req, gates.plan, gates.install, busy=gates.busy_text, paused=gates.paused,
                                   current=cur)

        return Judged(check, lambda: new_removal(req, self._ts(),
                                                 [identity_name("agent", req.cluster, h) for h in req.nodes]))

    def refused(self, req: RemoveNodes, why: str, kind: str) -> Out:
        ev = RemoveNodesFinished(request_id=req.request_id, cluster=req.cluster, status=FinishedStatus.FAILED, reason=why,
                                 at=self._ts(), kind=kind)
        return Out(ev, REMOVE_NODES_FINISHED, msg_id=f"remove-finished:{req.request_id}")

    # the carriers: each stage for every node in it; a refusal (4xx) fails them ----------------
    async def _drain(self, r: Removal, d: Act) -> Decision | None:
        try:
            why = await self.drainer.cordon_and_drain(await self.plans.load(r.cluster), list(d.nodes),
                                                      self.drain_timeout_s, drain_options(r))
        except ValueError as exc:  # the API refused: retrying will not help
            why = str(exc)
        if why:
            fail_stage(r, d.nodes, why)
        else:
            advance(r, d.nodes)
        return None

    async def _delete_nodes(self, r: Removal, d: Act) -> Decision | None:
        try:
            await self.drainer.delete_nodes(await self.plans.load(r.cluster), list(d.nodes))
        except ValueError as exc:  # the API refused: retrying will not help
            fail_stage(r, d.nodes, str(exc))
            return None
        advance(r, d.nodes)
        return None

    async def _forget(self, r: Removal, d: Act) -> Decision | None:
        await forget_nodes(self.state, r.cluster, list(d.nodes))
        advance(r, d.nodes)
        return None

    async def _resets(self, r: Removal, d: Act) -> Decision | None:
        for run in (n for n in r.nodes if n.hostname in d.nodes):
            # binaries too: the node leaves BKE (a reset of a cluster's node keeps them for a re-install)
            step = ResetNode(id="reset-node", etcd_data_dirs=[], binaries=True)
            await self.send_command(r.cluster, run.hostname, run.command_id, r.slug, [step])
            run.status = RunStatus.RUNNING
        return None
