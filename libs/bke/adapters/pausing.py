"""The pause command as every operation-running service handles it (bke.contracts.pause): record
the flag in the service's own record, say so on the bus, and on a resume wake the loops that
were held. The services (dispatcher, upgrader) wire it with their runners' `kick`s."""
from __future__ import annotations

import logging
from datetime import datetime
from typing import Any, Callable

from bke.adapters.bus.handler import Out, typed
from bke.contracts.pause import PAUSE_CLUSTER, PauseChanged, PauseCluster, pause_subject
from bke.adapters.state.pause import PauseFlags

__all__ = ["serve_pause"]

log = logging.getLogger("bke.pause")


def serve_pause(svc: Any, flags: PauseFlags, kicks: list[Callable[[str], None]], now: Callable[[], datetime]) -> None:
    """Subscribe the service to `bke.v1.cluster.pause` with a durable of its own (each service
    gets every pause request; replicas of one service share it)."""

    async def on_pause(req: PauseCluster) -> list[Out]:
        at = now().isoformat()
        await flags.set(req.cluster, req.paused, req.reason, req.request_id, at)
        log.info("paused" if req.paused else "resumed", extra={"cluster": req.cluster, "reason": req.reason,
                                                                "requestId": req.request_id})
        if not req.paused:
            for kick in kicks:
                kick(req.cluster)
        changed = PauseChanged(request_id=req.request_id, cluster=req.cluster, service=svc.name, paused=req.paused,
                               reason=req.reason, at=at)
        return [Out(changed, pause_subject(req.cluster), msg_id=f"pause:{svc.name}:{req.request_id}")]

    # BKE_EVENTS, not BKE_COMMANDS: two services consume it, and a work-queue stream takes one
    # consumer per subject ("filtered consumer not unique on workqueue stream")
    svc.work_subscriber(PAUSE_CLUSTER, "BKE_EVENTS", f"{svc.name}-pause", typed(PauseCluster, on_pause, svc.publish))
