"""The renderer's handlers: typed messages in, messages to publish out (bke.adapters.bus.handler), thin
over `service_core.ensure_rendered`.

    plan created        -> render and store every node's files: `manifests rendered`, or
                           `manifests failed` with the reason and its kind
    render manifests    -> the same for the stored plan (a retry after a failure, a join; a
                           join's etcd-only members rendered as joins of their running clusters)
    (given up on)       -> a plan message that failed on every delivery (the store cannot be
                           written, say) is answered with `manifests failed`, kind operational,
                           so that the install fails with a reason instead of waiting
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Awaitable, Callable

from bke.core.plan import Plan

from bke.contracts import PlanCreated
from bke.contracts.render import MANIFESTS_RENDERED, RENDER_FAILED, ManifestsRendered, RenderFailed, RenderManifests
from bke.adapters.bus.handler import Out, Publish, first_of
from bke.core.errors import RejectedInput
from bke.core.render import EtcdJoin
from bke.core.render.errors import RenderError
from bke.core.secrets.record_signing import RecordKeyError, RecordSignatureError
from bke.adapters.state import RedisPlanStore

from .service_core import RenderStore, ensure_rendered

__all__ = ["RendererHandlers"]

log = logging.getLogger("bke.renderer")


@dataclass
class RendererHandlers:
    plans: RedisPlanStore
    store: RenderStore
    publish: Publish
    # told every outcome with its plan (the dashboard's recent list and /metrics: history.py)
    # (plan, whether a new set was stored, the event): before it is published
    observe: Callable[[Plan, bool, Out], Awaitable[None]] | None = None

    async def on_plan(self, ev: PlanCreated) -> list[Out]:
        return await self.ensure(ev.cluster, ev.request_id, ev.plan_digest)

    async def on_render_manifests(self, req: RenderManifests) -> list[Out]:
        meta = await self.plans.meta(req.cluster)
        if meta is None:
            failed = RenderFailed(request_id=req.request_id, cluster=req.cluster, kind="invalid",
                                  errors=[f"cluster {req.cluster!r} has no plan"])
            return [Out(failed, RENDER_FAILED)]
        joins = tuple(EtcdJoin(e.etcd_cluster, e.member, e.initial_cluster) for e in req.etcd_joins or ())
        return await self.ensure(req.cluster, req.request_id, meta.digest, joins)

    async def ensure(self, cluster: str, request_id: str, digest: str, etcd_joins: tuple[EtcdJoin, ...] = ()) -> list[Out]:
        try:
            plan = await self.plans.load(cluster)
        except (RecordSignatureError, RecordKeyError) as exc:
            # a plan its writer did not sign is never rendered; the operation fails naming it
            log.warning("plan refused: %s", exc, extra={"cluster": cluster, "request_id": request_id})
            return [Out(RenderFailed(request_id=request_id, cluster=cluster, errors=[str(exc)], kind="invalid",
                                     plan_digest=digest), RENDER_FAILED)]
        report = None
        try:
            report = await ensure_rendered(plan, self.store, etcd_joins=etcd_joins)
        except RenderError as exc:
            log.info("render refused: %s", exc, extra={"cluster": cluster, "request_id": request_id})
            errors = [f"{p}: {m}" for p, m in exc.errors] if isinstance(exc, RejectedInput) else [str(exc)]
            kind = "invalid" if isinstance(exc, RejectedInput) else "operational"
            said = Out(RenderFailed(request_id=request_id, cluster=cluster, errors=errors, kind=kind, plan_digest=digest),
                       RENDER_FAILED)
        else:
            out = ManifestsRendered(
                request_id=request_id, cluster=cluster, digest=report.digest, nodes=report.nodes, files=report.files,
                tier=report.tier, template_sets=report.template_sets, warnings=report.warnings, plan_digest=digest,
            )
            said = Out(out, MANIFESTS_RENDERED, f"rendered:{request_id}:{report.digest}")
        if self.observe is not None:
            await self.observe(plan, report is not None and report.stored, said)
        return [said]

    async def gave_up(self, body: bytes, reason: str) -> None:
        """Every delivery of a plan (or render request) failed unexpectedly: say so for its cluster."""
        ev = first_of(body, PlanCreated, RenderManifests)
        assert isinstance(ev, (PlanCreated, RenderManifests))
        failed = RenderFailed(request_id=ev.request_id, cluster=ev.cluster, kind="operational",
                              plan_digest=getattr(ev, "plan_digest", ""), errors=[f"the renderer gave up: {reason}"])
        await self.publish(failed.to_bytes(), RENDER_FAILED, {})
