"""What the planner, renderer and certs services say about a cluster, recorded for the install.

    plan created        -> start the install (or, for a replaced plan of an install that failed
                           before any node changed, start it again from the beginning)
    manifests rendered  -> render input Ready          manifests failed -> render input Failed
    certs issued        -> certs input Ready           certs failed     -> certs input Failed
    certs sealed        -> these nodes' bundles exist

Each handler takes its typed event (bke.adapters.bus.handler), publishes nothing, records what it says
and wakes the cluster's reconcile loop; the install's loop decides (a failed input fails the install at
once, with the service's reason). A failure can arrive before this dispatcher has seen the plan:
the install record is then created from the failure event, and the plan event completes it.
"""
from __future__ import annotations

import logging
from datetime import datetime
from typing import Callable

from bke.contracts import PlanCreated
from bke.contracts.agent import AgentAccepted
from bke.contracts.certs import CertsFailed, CertsIssued, CertsSealed
from bke.contracts.render import ManifestsRendered, RenderFailed
from bke.contracts.statuses import InstallStatus
from bke.adapters.coalesce import Coalesced
from bke.adapters.runner import Kick
from bke.adapters.state import PlanCache
from bke.adapters.state.operation_slot import claim_operation

from .ops.install.run import Installs
from .phases import PHASES
from .readiness import InputRecord, InputStatus
from .state import DispatcherState

__all__ = ["ServiceEvents"]

log = logging.getLogger("bke.dispatcher")


class ServiceEvents:
    def __init__(self, state: DispatcherState, plans: PlanCache, installs: Installs, kick: Kick,
                 now: Callable[[], datetime]):
        self.state, self.plans, self.installs, self.kick, self.now = state, plans, installs, kick, now
        # cluster -> the agents accepted in one turn, written together (one round trip, not one
        # per agent: 10,000 of them register at once in a large install)
        self._accepting: Coalesced[str, tuple[str, str], None] = Coalesced(self._accept_many)

    async def plan_created(self, ev: PlanCreated) -> None:
        inst = await self.state.install(ev.cluster)
        if inst and inst.get("planDigest") and inst["planDigest"] != ev.plan_digest:
            if inst.get("status") == InstallStatus.FAILED and inst.get("nodesChanged") != "1":
                # the planner replaced a spec that was refused before any node changed
                log.info("plan replaced: install starts again", extra={"cluster": ev.cluster, "request_id": ev.request_id})
                await self.state.reset_install(ev.cluster, [p.slug for p in PHASES], ev.plan_digest)
            else:
                log.warning("plan event for another plan ignored", extra={"cluster": ev.cluster, "request_id": ev.request_id})
                return
        elif inst and not inst.get("planDigest"):
            # created from a failure that named no plan: the plan event says which one it is
            await self.state.set_install(ev.cluster, planDigest=ev.plan_digest, requestId=ev.request_id)
        await self._ensure_install(ev.cluster, ev.request_id, ev.plan_digest)
        self.kick(ev.cluster, True)  # one event, nothing to wait for with it: the install goes now

    async def rendered(self, ev: ManifestsRendered) -> None:
        await self._record(ev.cluster, "render", InputRecord(InputStatus.READY, digest=ev.plan_digest), ev.request_id)

    async def render_failed(self, ev: RenderFailed) -> None:
        reason = "; ".join(ev.errors)[:2000]
        rec = InputRecord(InputStatus.FAILED, digest=ev.plan_digest, reason=reason, kind=ev.kind)
        await self._record(ev.cluster, "render", rec, ev.request_id)

    async def certs_issued(self, ev: CertsIssued) -> None:
        await self._record(ev.cluster, "certs", InputRecord(InputStatus.READY, digest=ev.plan_digest), ev.request_id)

    async def certs_failed(self, ev: CertsFailed) -> None:
        if ev.operation != "install":  # a refused renewal is its requester's business
            return
        rec = InputRecord(InputStatus.FAILED, digest=ev.plan_digest, reason=ev.reason[:2000], kind=ev.kind, node=ev.node)
        await self._record(ev.cluster, "seal" if ev.node else "certs", rec, ev.request_id)

    async def agent_accepted(self, ev: AgentAccepted) -> None:
        """The certs service found the agent's key to be the provisioned one: the node's agent."""
        await self._accepting(ev.cluster, (ev.node, ev.agent_id))
        self.kick(ev.cluster)

    async def _accept_many(self, cluster: str, accepted: list[tuple[str, str]]) -> list[None]:
        await self.state.accept_agents(cluster, dict(accepted))  # a node named twice: its last, as in turn
        return [None] * len(accepted)

    async def certs_sealed(self, ev: CertsSealed) -> None:
        await self.state.accept_agents(ev.cluster, {n: a for n, a in ev.agents.items() if n in ev.nodes})
        await self.state.add_sealed(ev.cluster, ev.nodes)
        self.kick(ev.cluster)

    async def _record(self, cluster: str, name: str, rec: InputRecord, request_id: str) -> None:
        inst = await self.state.install(cluster)
        if inst.get("status") == InstallStatus.SUCCEEDED:  # a late event never reopens a finished install
            log.info("%s event after the install succeeded ignored", name, extra={"cluster": cluster, "request_id": request_id})
            return
        if rec.status is InputStatus.FAILED and not inst:
            await self._ensure_install(cluster, request_id, rec.digest)
        # About another plan, a record is kept (it may be the replacement's, arriving before its
        # plan event), but never over one about the install's own plan: atomically, since the
        # events of one input come through two consumers (rendered, failed) at once.
        if not await self.state.record_input(cluster, name, rec.to_doc(), inst.get("planDigest", "")):
            log.info("stale %s event ignored", name, extra={"cluster": cluster, "request_id": request_id})
            return
        if rec.status is InputStatus.FAILED:
            log.warning("%s failed: %s", name, rec.reason[:300], extra={"cluster": cluster, "request_id": request_id})
        self.kick(cluster, True)  # a service's one answer for the install: its phase goes on now

    async def _ensure_install(self, cluster: str, request_id: str, digest: str) -> None:
        if await self.state.start_install(cluster, request_id, self.now().isoformat(), digest):
            await self.installs.set_total(cluster, await self.plans.load(cluster))
        inst = await self.state.install(cluster)
        if inst.get("status") != InstallStatus.RUNNING:
            return
        # one operation per cluster: a running install holds the slot (claimed again on a
        # redelivery or a resume: idempotent); another operation holding it fails the install
        # with its name (a plan replaced while a reset of the failed install runs)
        rid, now = inst.get("requestId", request_id), self.now().isoformat()
        claim = await claim_operation(self.state.r, cluster, "install", rid, now)
        if not claim.won:
            why = claim.refusal(cluster)
            log.warning("install refused: %s", why, extra={"cluster": cluster, "request_id": rid})
            await self.installs.refuse(cluster, rid, why)
