"""Certs wiring: broker, Redis, the operator key, four subscribers, the fork server. No logic here."""
from __future__ import annotations

import threading
from datetime import datetime, timezone

from redis.asyncio import Redis

from bke.bus.service import Service, make_service
from bke.contracts import PLAN_CREATED
from bke.contracts.certs import ISSUE_REQUESTED, RENEW_REQUESTED
from bke.pki.issuance import start_fork_server
from bke.secrets import box_from_env

from .handlers import CertsHandlers
from .settings import CertsSettings

__all__ = ["create_service"]


def create_service(settings: CertsSettings | None = None) -> Service:
    settings = settings or CertsSettings()
    svc = make_service("certs", settings)
    redis = Redis.from_url(settings.redis_url)
    svc.on_stop.append(redis.aclose)
    box = box_from_env()  # read once: a missing key file fails at start, not at the first message
    h = CertsHandlers(redis=redis, box_factory=lambda: box, publish=svc.publish, now=lambda: datetime.now(timezone.utc))
    svc.work_subscriber(PLAN_CREATED, "BKE_EVENTS", "certs-plans", h.on_plan, batch_size=4, give_up=h.gave_up)
    svc.work_subscriber(ISSUE_REQUESTED, "BKE_COMMANDS", "certs-issue", h.on_issue_requested, batch_size=4,
                        give_up=h.gave_up)
    svc.fast_subscriber("bke.v1.agent.*.*.registered", "BKE_AGENT", "certs-agents", h.on_registered, workers=8)
    svc.work_subscriber(RENEW_REQUESTED, "BKE_COMMANDS", "certs-renew", h.on_renew, batch_size=4)

    async def fork_server() -> None:
        # In the background: the first big cluster then finds its worker processes' parent ready.
        threading.Thread(target=start_fork_server, name="certs-fork-server", daemon=True).start()

    svc.after_start.append(fork_server)
    return svc
