"""The current and target render of a cluster, per node, kept while its upgrade runs.

Rendering is pure and deterministic (bke.core.render), so the upgrader renders the plan it starts
from and the plan it leads to itself, and sends each node exactly the files that differ: after a
restart it renders both again and gets the same bytes. The cluster's VRRP password (the
renderer's, made once per cluster) is read from the store and handed to the child on its stdin:
keepalived.conf then holds the bytes the nodes run, and a changed spec's load-balancer step
sends it sealed to each master's agent (bke.core.upgrade.node_commands). A cluster without a VIP has
none (a placeholder is rendered, and no node runs keepalived).

Both renders run in a child process (render_child: why there), which hands back only the files
that differ. Errors: the plan does not render -> RenderFailed (permanent: the run fails naming
it); the child dies or cannot start -> TemporaryError (the next pass renders again)."""
from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import pickle
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from bke.core.errors import PermanentError, TemporaryError
from bke.core.plan import Plan
from bke.core.render.result import RenderedFile

__all__ = ["ClusterRenders", "RenderFailed", "Renders"]

log = logging.getLogger("bke.upgrader")
STDERR_KEEP = 2000


@dataclass(frozen=True)
class ClusterRenders:
    # hostname -> path -> file: the renders, or (from the child) only the files that differ
    # between them; node_commands.changed_files reads either the same way
    old: dict[str, dict[str, RenderedFile]]
    new: dict[str, dict[str, RenderedFile]]
    new_addons: dict[str, str]  # addon name -> rendered manifest text (kube-proxy, coredns, rbac)
    # rendered with the cluster's stored VRRP password (else keepalived.conf holds a placeholder
    # and must not be sent)
    vrrp: bool = False


class RenderFailed(PermanentError):
    """A plan of the upgrade does not render: the message is the renderer's own error."""


class Renders:
    """One entry per (cluster, request): a 5,000-node render takes seconds, done once. `start`
    begins it in the background (the first steps need no file, so it overlaps with them); `get`
    waits for it. A render that failed is begun again by the next caller.

    `freeze_heap` (the service sets it; a test process keeps its collector as it is): what the
    process holds is frozen for the garbage collector (`gc.freeze`) when a render begins (the
    two plans it renders from are loaded then) and again when it is in. The run's plans
    (PlanCache, targets.plans_of) and its renders are ~250,000 objects at 5,000 nodes that
    live as long as the run, and each of the collector's full passes walked them all: 5 to 7
    an upgrade, 0.4-0.9 CPU-s of the upgrader's 6-9 (bench/upgrade.py --profile --gc-only).
    Frozen objects are still freed by reference counting when dropped; so that a cycle among
    them is not kept for good, each new render first unfreezes the heap and collects it once."""

    def __init__(self, vrrp_password: Callable[[str], Awaitable[str | None]] | None = None, *,
                 freeze_heap: bool = False) -> None:
        self._cache: dict[tuple[str, str], asyncio.Future[ClusterRenders]] = {}
        self._vrrp = vrrp_password  # cluster -> its VRRP password, None if it has none
        self._freeze = freeze_heap

    def start(self, request_id: str, old: Plan, new: Plan) -> asyncio.Future[ClusterRenders]:
        key = (old.cluster, request_id)
        fut = self._cache.get(key)
        if fut is None or (fut.done() and (fut.cancelled() or fut.exception() is not None)):
            fut = asyncio.ensure_future(self._render(old, new))
            self._cache = {k: v for k, v in self._cache.items() if k[0] != old.cluster}  # one per cluster
            self._cache[key] = fut
            if self._freeze:  # why: the class docstring
                gc.unfreeze()
                gc.collect()  # one full pass a render, over what was frozen too
                gc.freeze()
        return fut

    async def get(self, request_id: str, old: Plan, new: Plan) -> ClusterRenders:
        # shielded: a reconcile pass cancelled at a stop leaves the render to the next one
        return await asyncio.shield(self.start(request_id, old, new))


    async def _render(self, old: Plan, new: Plan) -> ClusterRenders:
        password = await self._vrrp(old.cluster) if self._vrrp is not None and old.load_balancer else None
        renders = await _render_both(old, new, password)
        if self._freeze:
            gc.freeze()  # why: the class docstring
        return renders


async def _render_both(old: Plan, new: Plan, vrrp_password: str | None = None) -> ClusterRenders:
    t0 = time.monotonic()
    doc = json.dumps({"old": old.to_json(), "new": new.to_json(), "vrrp": vrrp_password}).encode()
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bke_upgrader.render_child",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    except OSError as exc:
        raise TemporaryError(f"the render process did not start: {exc}", delay=5.0) from exc
    try:
        out, err = await proc.communicate(doc)
    finally:
        if proc.returncode is None:  # cancelled (the service stops): the child goes with it
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await asyncio.shield(proc.wait())
    if proc.returncode != 0 or not out:
        tail = err.decode(errors="replace")[-STDERR_KEEP:].strip()
        raise TemporaryError(f"the render process ended with {proc.returncode}: {tail}", delay=5.0)
    answer = pickle.loads(out)  # our own child's answer (render_child: the only writer)
    if answer[0] == "error":
        raise RenderFailed(answer[1])
    _, old_files, new_files, addons, peak_kb, cpu_s = answer
    log.info("both renders done in a child process: %.1f s, %.1f CPU-s, its peak RSS %d MB", time.monotonic() - t0,
             cpu_s, peak_kb // 1024, extra={"cluster": old.cluster})
    return ClusterRenders(old_files, new_files, addons, vrrp=vrrp_password is not None)
