"""The current and target render of a cluster, per node, kept while its upgrade runs.

Rendering is pure and deterministic (bke.render), so the upgrader renders the plan it starts
from and the plan it leads to itself, and sends each node exactly the files that differ: after a
restart it renders both again and gets the same bytes. Load-balancer files are left out (see
bke.upgrade.node_commands); the VRRP password given here is therefore never used."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass

from bke.plan import Plan
from bke.render import RenderInputs, render_cluster
from bke.render.result import RenderedFile

__all__ = ["ClusterRenders", "Renders"]

_UNUSED_VRRP = "upgrader"  # keepalived.conf is not part of an upgrade


@dataclass(frozen=True)
class ClusterRenders:
    old: dict[str, dict[str, RenderedFile]]  # hostname -> path -> file
    new: dict[str, dict[str, RenderedFile]]
    new_addons: dict[str, str]  # addon name -> rendered manifest text (kube-proxy, coredns, rbac)


def _by_node(plan: Plan) -> tuple[dict[str, dict[str, RenderedFile]], dict[str, str]]:
    rendered = render_cluster(plan, RenderInputs(vrrp_password=_UNUSED_VRRP))
    files = {n.hostname: {f.path: f for f in n.files} for n in rendered.nodes}
    addons = {f.path.removesuffix(".yaml"): f.content.decode() for f in rendered.addons}
    return files, addons


class Renders:
    """One entry per (cluster, request): a 5,000-node render takes seconds, done once. `start`
    begins it in the background (the first steps need no file, so it overlaps with them); `get`
    waits for it. A render that failed is begun again by the next caller."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, str], asyncio.Future[ClusterRenders]] = {}

    def start(self, request_id: str, old: Plan, new: Plan) -> asyncio.Future[ClusterRenders]:
        key = (old.cluster, request_id)
        fut = self._cache.get(key)
        if fut is None or (fut.done() and (fut.cancelled() or fut.exception() is not None)):
            fut = asyncio.ensure_future(_render_both(old, new))
            self._cache = {k: v for k, v in self._cache.items() if k[0] != old.cluster}  # one per cluster
            self._cache[key] = fut
        return fut

    async def get(self, request_id: str, old: Plan, new: Plan) -> ClusterRenders:
        # shielded: a reconcile pass cancelled at a stop leaves the render to the next one
        return await asyncio.shield(self.start(request_id, old, new))


async def _render_both(old: Plan, new: Plan) -> ClusterRenders:
    (old_files, _), (new_files, addons) = await asyncio.gather(
        asyncio.to_thread(_by_node, old), asyncio.to_thread(_by_node, new))
    return ClusterRenders(old_files, new_files, addons)
