"""Removing workers, the adapters: the removal's record (membership_store), its handler, and the
reconcile step the removal runner calls. Decisions are `removal`'s; this module carries them
out (the shape of resets.py):

    drain / delete-node  through the API with admin.conf (bke.adapters.drain.KubernetesDrainer); the lab
                         records both in `bke:<c>:removal:api` (bke.lab.standins.drain.LabDrainer)
    reset                one signed `ResetNode` command per node, fixed id
                         `<cluster>/remove@<rid>/<node>/0`; its answer comes through
                         LeasedOperation.on_result
    forget               the dispatcher's own per-node records deleted (`forget_nodes`)

At the end `remove-nodes.finished` names the agents' bus identities: revoking one needs the
NATS authority (an operator key and the system account), which no service holds, so the
caller revokes them (the lab does at once, as `bke delete` does).

Errors (see bke.core.errors): a malformed request is dead-lettered; a refused one is answered with
`remove-nodes.finished` Failed and acked; a request that fails on every delivery is answered
the same way once dead-lettered (membership_give_up); a drain that times out or an API that
refuses (4xx) fails the node's stage; an API or Redis that is away is retried by the runner.
The certs service forgets a removed node's keys on `finished` (bke_certs.removed_nodes).
"""
from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime

from bke.adapters.auth.permissions import identity_name
from bke.adapters.bus.handler import Out
from bke.contracts.agent import AgentCommand, ResetNode, agent_subject
from bke.contracts.membership import (
    REMOVE_NODES_FINISHED, RemoveNodes, RemoveNodesChanged, RemoveNodesFinished, remove_changed_subject,
)
from bke.adapters.drain import Drainer
from bke.adapters.state.operation_slot import release_operation
from bke.adapters.state import PlanCache
from bke.adapters.state.keys import (
    accepted_agents_key, command_key, health_key, heartbeat_cgroup_key, heartbeat_key, node_labels_key,
    node_status_key, sealed_key,
)

from ...engine import Outcome
from ...leased import LeasedOperation
from ..membership.gates import Busy, OperationStore, read_gates, start_operation
from ...phases import PHASES
from .decide import Removal, advance, apply_result, fail_stage, new_removal, next_step, removal_refusal
from bke.adapters.state.command_signing import Sign
from ...state import DispatcherState

__all__ = ["DRAIN_TIMEOUT_S", "Removals", "forget_nodes"]

log = logging.getLogger("bke.dispatcher.removal")
Publish = Callable[[bytes, str, dict[str, str]], Awaitable[None]]
LEASE = "removal"
WAIT_S = 5.0
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


class Removals(LeasedOperation):
    LEASE = LEASE

    def __init__(self, store: OperationStore[Removal], state: DispatcherState, plans: PlanCache, drainer: Drainer,
                 busy: Callable[[str], Awaitable[Busy | None]], paused: Callable[[str], Awaitable[bool]], publish: Publish,
                 now: Callable[[], datetime], owner: str, lease_ms: int = 15000,
                 kick: Callable[[str], None] | None = None, *, sign: Sign, drain_timeout_s: float = DRAIN_TIMEOUT_S):
        self.store, self.state, self.plans, self.drainer = store, state, plans, drainer
        self.busy, self.paused, self.publish, self.sign = busy, paused, publish, sign
        self.now, self.owner, self.lease_ms, self.drain_timeout_s = now, owner, lease_ms, drain_timeout_s
        self.kick: Callable[[str], None] = kick or (lambda cluster: None)

    def _ts(self) -> str:
        return self.now().isoformat()

    async def on_request(self, req: RemoveNodes) -> list[Out]:
        ids = {"cluster": req.cluster, "request_id": req.request_id}
        current, unreadable = await self.store.load_judged(req.cluster)
        if current is not None and current.request_id == req.request_id:  # a redelivery
            self.kick(req.cluster)
            return []
        g, outside = (await read_gates(req.cluster, self.plans, self.state, self.busy, self.paused)).within(
            req.cluster, req.part_of)

        def check(cur: Removal | None) -> str:
            return removal_refusal(req, g.plan, g.install, busy=g.busy_text, paused=g.paused, current=cur)

        why = unreadable or outside or check(current)
        rec = new_removal(req, self._ts(), [identity_name("agent", req.cluster, h) for h in req.nodes])
        if not why:
            # the cluster's one operation slot, as a join takes it (or the apply run's)
            why = await start_operation(self.state.r, req.cluster, "removal", req.request_id, req.part_of, self._ts(),
                                        lambda: self.store.start(rec, check))
        if why:
            log.warning("removal refused: %s", why, extra=ids)
            ev = RemoveNodesFinished(request_id=req.request_id, cluster=req.cluster, status="Failed", reason=why,
                                     at=self._ts(), kind="operational" if unreadable else "invalid")
            return [Out(ev, REMOVE_NODES_FINISHED, msg_id=f"remove-finished:{req.request_id}")]
        log.info("removal started: %d node(s)", len(rec.nodes), extra=ids)
        await self._changed(rec)
        self.kick(req.cluster)
        return []

    async def _changed(self, r: Removal) -> None:
        ev = RemoveNodesChanged(cluster=r.cluster, at=self._ts(), removal=r.view())
        await self.publish(ev.to_bytes(), remove_changed_subject(r.cluster), {})

    async def _finished(self, r: Removal) -> None:
        ev = RemoveNodesFinished(request_id=r.request_id, cluster=r.cluster, status=r.status,  # type: ignore[arg-type]
                                 reason=r.message, nodes=r.node_views(),
                                 revoke_identities=[i for i, n in zip(r.identities, r.nodes) if n.stage in ("forget", "done")],
                                 at=r.finished_at, kind="operational" if r.status == "Failed" else None)
        await self.publish(ev.to_bytes(), REMOVE_NODES_FINISHED, {"Nats-Msg-Id": f"remove-finished:{r.cluster}:{r.request_id}"})
        r.finished_sent = True
        await self.store.save(r)

    async def _reconcile(self, cluster: str) -> Outcome:
        r = await self.store.load(cluster)
        if r is None:
            return Outcome("done")
        if r.status != "Running":
            await release_operation(self.state.r, cluster, "removal", r.request_id)  # again: idempotent
            if not r.finished_sent:
                await self._finished(r)
            return Outcome("done")
        changed = False
        for cid, res in (await self.store.results(cluster)).items():
            changed |= apply_result(r, cid, res["status"], res["step"], res["stderr"])
        # stages that need no answer run one after the other within a pass
        while True:
            d = next_step(r)
            if d.action not in ("drain", "delete-node", "reset", "forget"):
                break
            changed = True
            if d.action == "reset":
                await self._resets(r, d.nodes)
                continue  # the decision is now to wait for the answers
            await self._stage(r, d.action, d.nodes)
        if d.action in ("succeed", "fail"):
            r.status = "Succeeded" if d.action == "succeed" else "Failed"
            r.message, r.finished_at = d.reason, self._ts()
            changed = True
            log.info("removal %s %s", r.status, d.reason, extra={"cluster": cluster, "request_id": r.request_id})
        if changed:
            await self.store.save(r)
            await self._changed(r)
        if r.status != "Running":
            # freed before the end is announced: whoever sees it may start the next operation
            await release_operation(self.state.r, cluster, "removal", r.request_id)
            await self._finished(r)
            return Outcome("done") if r.status == "Succeeded" else Outcome("failed", reason=r.message)
        return Outcome("wait", delay=WAIT_S, reason="resets in flight")

    async def _stage(self, r: Removal, stage: str, hosts: tuple[str, ...]) -> None:
        """One stage the dispatcher does itself, for every node in it; a refusal fails them."""
        try:
            if stage == "forget":
                await forget_nodes(self.state, r.cluster, list(hosts))
            else:
                plan = await self.plans.load(r.cluster)
                if stage == "drain":
                    why = await self.drainer.cordon_and_drain(plan, list(hosts), self.drain_timeout_s)
                    if why:
                        fail_stage(r, hosts, why)
                        return
                else:
                    await self.drainer.delete_nodes(plan, list(hosts))
        except ValueError as exc:  # the API refused (4xx): retrying will not help
            fail_stage(r, hosts, str(exc))
            return
        advance(r, hosts)

    async def _resets(self, r: Removal, hosts: tuple[str, ...]) -> None:
        for run in r.nodes:
            if run.hostname not in hosts:
                continue
            # binaries too: the node leaves BKE (a reset of a cluster's node keeps them for a re-install)
            step = ResetNode(id="reset-node", etcd_data_dirs=[], binaries=True)
            cmd = await self.sign(AgentCommand(command_id=run.command_id, cluster=r.cluster, node=run.hostname,
                                               phase=r.slug, issued_at=self._ts(), steps=[step]))
            await self.publish(cmd.to_bytes(), agent_subject(r.cluster, run.hostname, "command"),
                               {"Nats-Msg-Id": run.command_id})
            run.status = "Running"

    async def resume_all(self) -> list[str]:
        resumed = []
        for cluster in await self.store.clusters():
            r = await self.store.load(cluster)
            if r is not None and (r.status == "Running" or not r.finished_sent):
                self.kick(cluster)
                resumed.append(cluster)
        return resumed
