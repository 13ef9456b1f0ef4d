"""The dispatcher's reconcile loops: the install and the operations beside it (rotation, reset,
join, removal), each on the one loop (bke.adapters.operation) and registered by its folder
(ops/wiring.py, ops/install), and the periodic health rounds; a pause holds the install and the
operations it names."""
from __future__ import annotations

from dataclasses import dataclass

from bke.adapters.operation import Operations
from bke.adapters.pausing import serve_pause

from ..health import HealthMonitor
from ..ops.install.commands import InstallCommands
from ..ops.install.run import Installs
from ..ops.install.store import InstallStore
from ..ops.join.run import Joins
from ..ops.wiring import Deps, wire_operations
from .basics import Basics
from .cluster_api import ClusterApi

__all__ = ["Loops", "wire_loops"]


@dataclass(frozen=True)
class Loops:
    installs: Installs
    health: HealthMonitor
    ops: Operations  # results, resumes, stops and pauses of the install and the operations go through here
    joins: Joins  # the renderer's and certs service's answers to a join are the join's

    async def stop(self) -> None:
        await self.ops.stop()

    async def resume(self) -> list[str]:
        """The running installs and operations, picked up again; their clusters."""
        return await self.ops.resume_all()


def wire_loops(b: Basics, api: ClusterApi) -> Loops:
    s, sign, prefetch = b.settings, b.signing.sign_bytes, b.signing.prefetch
    health = HealthMonitor(b.state, b.plans, b.svc.publish, b.now, s.health_interval_s, pods=api.pods, sign=sign,
                           owner=s.owner, prefetch=prefetch)
    wired = wire_operations(Deps(
        svc=b.svc, redis=b.redis, state=b.state, plans=b.plans, files=b.files, checksums=api.checksums,
        marker=api.marker, kubeconfig=api.kubeconfig, paused=b.pause.is_paused, publish=b.publish, notify=b.notify,
        now=b.now, owner=s.owner, lease_ms=s.lease_ms, sign=b.signing.sign, batch_size=s.batch_size,
        agents_deadline_s=s.join_agents_timeout_s))
    commands = InstallCommands(b.state, b.files, api.checksums, b.publish, b.notify, b.now, sign, prefetch)
    installs = Installs(InstallStore(b.state), b.plans, commands, api.local, b.now, s.owner, s.lease_ms)
    wired.operations.drive(installs, paused=b.pause.is_paused)  # paused: no phase takes a new step
    serve_pause(b.svc, b.pause, wired.operations.held_by_pause(), b.now)
    return Loops(installs, health, wired.operations, wired.joins)
