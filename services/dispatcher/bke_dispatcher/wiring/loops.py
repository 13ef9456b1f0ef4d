"""The dispatcher's reconcile loops: the install's engine on its runner, the periodic health
rounds, and the operations beside the install (rotation, reset, join, removal), each registered
by its folder (ops/wiring.py); a pause holds the install and the operations it names."""
from __future__ import annotations

from dataclasses import dataclass

from bke.adapters.operation import Operations
from bke.adapters.pausing import serve_pause
from bke.adapters.runner import Runner

from ..engine import Engine
from ..health import HealthMonitor
from ..ops.join.run import Joins
from ..ops.wiring import Deps, wire_operations
from .basics import Basics
from .cluster_api import ClusterApi

__all__ = ["Loops", "wire_loops"]


@dataclass(frozen=True)
class Loops:
    engine: Engine
    runner: Runner  # the install's
    health: HealthMonitor
    ops: Operations  # results, resumes, stops and pauses of the operations go through here
    joins: Joins  # the renderer's and certs service's answers to a join are the join's

    async def stop(self) -> None:
        await self.runner.stop()
        await self.ops.stop()

    async def resume(self) -> list[str]:
        """The running installs and operations, picked up again; their clusters."""
        return await self.runner.resume_all() + await self.ops.resume_all()


def wire_loops(b: Basics, api: ClusterApi) -> Loops:
    s, sign, prefetch = b.settings, b.signing.sign_bytes, b.signing.prefetch
    engine = Engine(b.state, b.plans, b.files, b.publish, api.checksums, api.local, b.now, s.owner, s.lease_ms,
                    notify=b.notify, sign=sign, prefetch=prefetch)
    runner = Runner(engine, b.state, paused=b.pause.is_paused)
    health = HealthMonitor(b.state, b.plans, b.svc.publish, b.now, s.health_interval_s, pods=api.pods, sign=sign,
                           owner=s.owner, prefetch=prefetch)
    wired = wire_operations(Deps(
        svc=b.svc, redis=b.redis, state=b.state, plans=b.plans, files=b.files, checksums=api.checksums,
        marker=api.marker, kubeconfig=api.kubeconfig, paused=b.pause.is_paused, publish=b.publish, notify=b.notify,
        now=b.now, owner=s.owner, lease_ms=s.lease_ms, sign=b.signing.sign, batch_size=s.batch_size,
        agents_deadline_s=s.join_agents_timeout_s))
    serve_pause(b.svc, b.pause, [runner.kick, *wired.operations.held_by_pause()], b.now)
    return Loops(engine, runner, health, wired.operations, wired.joins)
