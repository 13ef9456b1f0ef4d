"""`bke retry --nodes` for an upgrade, the adapter: `RetryUpgrade` in, a new run of the named
nodes stored, `upgrade.accepted` / `.rejected` out.

The decision is bke.core.upgrade.retry's (pure): which nodes are behind comes from the per-node
versions the last run left (bke.core.upgrade.node_versions), the live agents from their heartbeats
(the same facts as an upgrade request). The new run is then carried out by `Upgrades`'
reconcile passes like any other: same order, same batches, same rollback.
"""
from __future__ import annotations

import logging

from bke.adapters.bus.handler import Out
from bke.contracts.agent import AGENT_VERSION
from bke.contracts.status import StatusError
from bke.contracts.upgrade import (
    UPGRADE_ACCEPTED,
    UPGRADE_REJECTED,
    RetryUpgrade,
    UpgradeAccepted,
    UpgradeChanged,
    UpgradeRejected,
    UpgradeVersions,
    upgrade_subject,
)
from bke.core.upgrade.retry import decide_retry, retry_run
from bke.core.upgrade.run import UpgradeRun

from .accept import upgrade_rejected
from .operation import Upgrades
from .requests import parse_retry, status_refusal, step_views
from .views import expanded, view

__all__ = ["Retries"]

log = logging.getLogger("bke.upgrader")


class Retries:
    def __init__(self, upgrades: Upgrades):
        self.up = upgrades

    async def on_retry_bytes(self, body: bytes) -> list[Out]:
        req = parse_retry(body)
        if isinstance(req, UpgradeRejected):
            log.warning("upgrade retry refused: %s", req.message, extra={"request_id": req.request_id})
            return [Out(req, UPGRADE_REJECTED, f"upgrade-rejected:{req.request_id}" if req.request_id else None)]
        return await self.on_retry(req)

    async def on_retry(self, req: RetryUpgrade) -> list[Out]:
        """Complete the last upgrade on nodes it left behind (bke.core.upgrade.retry decides)."""
        def rejected(message: str) -> list[Out]:
            return upgrade_rejected(UpgradeRejected(request_id=req.request_id, cluster=req.cluster, message=message),
                                    "upgrade retry")

        last = await self.up.store.load(req.cluster)
        if last is not None and last.request_id == req.request_id:
            self.up.kick(req.cluster)  # a redelivery: that retry exists already
            return []
        if last is not None and last.is_apply:
            # a changed spec's run keeps no per-node target to retry towards; the stored plan is
            # replaced only when every node took it, so applying the spec again completes it
            return rejected(f"the last operation of {req.cluster} is a changed spec (apply {last.request_id}, "
                            f"{last.status}): run `bke apply SPEC` again to complete it")
        status = await self.up.records.facts.status(req.cluster)
        if isinstance(status, StatusError):
            return rejected(status_refusal(req.cluster, status))
        busy = await self.up.busy(req.cluster, "upgrade", req.request_id)  # one operation per cluster
        if busy:
            return rejected(busy)
        plan = await self.up.records.plans.load(req.cluster)
        facts = await self.up.records.facts.gather(plan, status)
        decided = decide_retry(last, await self.up.store.node_versions(req.cluster), req.nodes,
                               {n.hostname for n in plan.nodes}, facts.agents_alive or frozenset(), req.cluster)
        if isinstance(decided, str):
            return rejected(decided)
        assert last is not None
        run = retry_run(last, plan, decided, req.request_id, self.up.ts(), agent_version=AGENT_VERSION,
                        plan_digest=await self.up.plan_digest(req.cluster))

        def refuse(cur: UpgradeRun | None) -> str:
            if cur is not None and cur.running:
                return f"upgrade {cur.request_id} of {req.cluster} is still running"
            if cur is not None and cur.request_id != last.request_id:
                return f"upgrade {cur.request_id} of {req.cluster} started meanwhile: retry again"
            return ""

        why = await self.up.start_claimed(run, refuse)
        if why:
            return rejected(why)
        log.info("upgrade retry accepted: %d node(s) of %s", len(decided.nodes), last.request_id,
                 extra={"cluster": req.cluster, "request_id": req.request_id})
        self.up.kick(req.cluster)
        answer = UpgradeAccepted(
            request_id=req.request_id, cluster=req.cluster, current=UpgradeVersions(**run.current),
            target=UpgradeVersions(**run.target), findings=[],
            steps=step_views([expanded(s) for s in run.steps], len(decided.nodes)),
            retry_of=last.request_id, nodes=list(decided.nodes))
        return [Out(answer, UPGRADE_ACCEPTED, f"upgrade-accepted:{req.request_id}"),
                Out(UpgradeChanged(cluster=req.cluster, at=self.up.ts(), upgrade=view(run)), upgrade_subject(req.cluster))]
