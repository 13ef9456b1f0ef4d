"""What the dispatcher does when its state is lost, and when it comes back (bke.adapters.state.epoch).

On every intact check (once a second) the dispatcher notes which installs are running, with their
request id and plan digest: the state may be gone when they must be failed. Then:

    state lost (epoch gone or changed)   stop the reconcile loops, and fail each install that was
                                         running with `install.finished` Failed, kind
                                         operational, "state lost: restore with `bke state
                                         restore`". The loss is published, never written to a
                                         store that is not ours any more. Messages wait in their
                                         streams (bke.adapters.state.epoch.StateLost)
    one cluster's record vanished        the same, for that cluster only (epoch intact)
    state restored (the epoch is back)   resume every install the restored state says is running

The failure event sets `nodesChanged`: the planner must never take the lost cluster's name for a
new plan, because that would make a new CA against nodes that hold the old one.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Awaitable, Callable

from bke.contracts.install import InstallFinished, install_subject
from bke.contracts.statuses import FinishedStatus, InstallStatus
from bke.adapters.state.epoch import STATE_LOST

from .state import DispatcherState

__all__ = ["StateLossReaction"]

log = logging.getLogger("bke.dispatcher")


@dataclass(frozen=True)
class _Running:
    request_id: str
    plan_digest: str
    phase: str


class StateLossReaction:
    def __init__(self, state: DispatcherState, publish: Callable[[bytes, str, dict[str, str]], Awaitable[None]],
                 now: Callable[[], datetime], stop_loops: Callable[[], Awaitable[None]],
                 resume: Callable[[], Awaitable[object]]):
        self.state, self.publish, self.now = state, publish, now
        self.stop_loops, self.resume = stop_loops, resume
        self.running: dict[str, _Running] = {}

    async def on_intact(self, epoch: str) -> None:
        """Note the running installs; fail any whose record vanished since the last look."""
        seen: dict[str, _Running] = {}
        for cluster in await self.state.installs():
            inst = await self.state.install(cluster)
            if inst.get("status") == InstallStatus.RUNNING:
                seen[cluster] = _Running(inst.get("requestId", ""), inst.get("planDigest", ""), inst.get("phase", ""))
        for cluster in set(self.running) - set(seen):
            if not await self.state.install(cluster):  # gone, not finished
                await self._fail(cluster, self.running[cluster], "the cluster's install record vanished")
        self.running = seen

    async def on_lost(self, detail: str) -> None:
        await self.stop_loops()
        for cluster, run in sorted(self.running.items()):
            await self._fail(cluster, run, detail)

    async def on_restored(self, epoch: str) -> None:
        resumed = await self.resume()
        log.warning("state restored: installs resumed: %s", resumed)

    async def _fail(self, cluster: str, run: _Running, detail: str) -> None:
        at = self.now().isoformat()
        ev = InstallFinished(request_id=run.request_id, cluster=cluster, status=FinishedStatus.FAILED, at=at,
                             phase=run.phase or None, message=f"{STATE_LOST}: {detail}", kind="operational",
                             nodes_changed=True, plan_digest=run.plan_digest)
        log.error("install failed: %s", ev.message, extra={"cluster": cluster, "request_id": run.request_id})
        await self.publish(ev.to_bytes(), install_subject(cluster, "finished"),
                           {"Nats-Msg-Id": f"finished:{cluster}:{run.request_id}:state-lost:{at}"})
