"""What the renderer service's handlers call: ensure a plan's files are rendered and stored.

    ensure_rendered(plan, store)   idempotent: the same plan gives the same digest, and a set that
                                   is already stored with that digest is not written again.

Errors (see bke.core.render.errors and bke.core.errors), for the handler to map:
    RenderRejected (UnsupportedVersionError, DeniedFlagError)  -> *.rejected/*.failed event, ack
    MissingInputError, InvalidOutputError                      -> failed event, ack (permanent)
    redis errors / anything else                               -> redelivery with backoff
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from pydantic import BaseModel

from bke.core.plan import Plan
from bke.core.render import EtcdJoin, NodeFiles, RenderedCluster, RenderInputs, generate_vrrp_password, render_cluster

__all__ = ["RenderReport", "RenderStore", "ensure_rendered"]

log = logging.getLogger(__name__)


class RenderStore(Protocol):
    async def digest(self, cluster: str) -> str | None: ...
    async def save(self, rendered: RenderedCluster) -> None: ...
    async def load_node(self, cluster: str, hostname: str) -> NodeFiles | None: ...
    async def vrrp_password(self, cluster: str, new: Callable[[], str]) -> str: ...


class RenderReport(BaseModel):
    cluster: str
    digest: str
    stored: bool  # False: an identical set was already stored (a redelivery, or a replayed plan)
    nodes: int
    files: int
    tier: str
    template_sets: list[str]
    warnings: list[str]


async def ensure_rendered(plan: Plan, store: RenderStore, *, new_password: Callable[[], str] = generate_vrrp_password,
                          offload: bool = True, etcd_joins: tuple[EtcdJoin, ...] = ()) -> RenderReport:
    """Render the plan (VRRP password fetched or created once per cluster) and store the result
    unless the stored digest is already this one. `offload` renders in a worker thread: a
    5,000-node render takes seconds of CPU and must not stall the event loop's acks.
    `etcd_joins`: members that join their running etcd cluster (a join's etcd-only nodes)."""
    extra = {"cluster": plan.cluster, "operation": "ensure_rendered"}
    password = await store.vrrp_password(plan.cluster, new_password) if plan.load_balancer else None
    inputs = RenderInputs(vrrp_password=password, etcd_joins=etcd_joins)
    rendered = await asyncio.to_thread(render_cluster, plan, inputs) if offload else render_cluster(plan, inputs)
    previous = await store.digest(plan.cluster)
    stored = previous != rendered.digest
    if stored:
        await store.save(rendered)
    log.info("%s %d files for %d nodes (tier %s, digest %s)", "stored" if stored else "unchanged, kept",
             rendered.file_count, len(rendered.nodes), rendered.tier, rendered.digest[:12], extra=extra)
    for w in rendered.warnings:
        log.warning(w, extra=extra)
    return RenderReport(cluster=plan.cluster, digest=rendered.digest, stored=stored, nodes=len(rendered.nodes),
                        files=rendered.file_count, tier=rendered.tier, template_sets=list(rendered.template_sets),
                        warnings=list(rendered.warnings))
