"""Automatic renewal: every `renew_interval_s`, each cluster's certificates expiring within
`renew_within_days` are renewed through the same path as `bke certs renew` (a
`RenewCerts`, origin "auto", on the bus), unless the cluster is busy (another operation holds
its slot, bke.adapters.state.operation_slot, or a rotation is pending); then the tick only
logs why and the next tick tries again. The decision is `renewal.auto_renew_decision`.
"""
from __future__ import annotations

import logging
import os
import socket
from dataclasses import replace
from collections.abc import Callable
from datetime import datetime, timedelta

from redis.asyncio import Redis

from bke.adapters.periodic import Periodic
from bke.contracts.certs import RENEW_CERTS, RenewCerts
from bke.core.pki import PkiNotReady, PkiStore
from bke.core.pki.operations import check_expiration
from bke.adapters.state.keys.certs import certs_lease_key
from bke.adapters.state.lease import claim_key
from bke.adapters.state.operation_slot import operation_holder, refusal
from bke.adapters.state.plans import planned_clusters
from bke.adapters.bus.handler import Publish

from .operations import OpsStore
from .renewal import AutoRenew, auto_renew_decision, auto_request_id

__all__ = ["AutoRenewer"]

log = logging.getLogger("bke.certs.autorenew")
TICK_LEASE = "autorenew"


class AutoRenewer:
    def __init__(self, redis: Redis, store: PkiStore, ops: OpsStore, publish: Publish, now: Callable[[], datetime],
                 interval_s: float, within_days: float, owner: str = ""):
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}"  # this replica, in the tick's lease
        self.redis, self.store, self.ops, self.publish, self.now = redis, store, ops, publish, now
        self.interval_s, self.within = interval_s, timedelta(days=within_days)
        self._rounds = Periodic("certs-autorenew", interval_s, self.tick, log)

    def start(self) -> None:
        self._rounds.start()

    async def stop(self) -> None:
        await self._rounds.stop()

    async def tick(self) -> dict[str, AutoRenew]:
        """One pass over every cluster; what was decided for each (for logs and tests)."""
        now = self.now()
        out: dict[str, AutoRenew] = {}
        for cluster in await planned_clusters(self.redis):
            # one replica's tick per period decides for a cluster: two deciding at once would
            # both find nothing pending and both ask for a renewal
            ttl_ms = max(1000, int(self.interval_s * 900))  # 90% of the period, never released
            if not await claim_key(self.redis, certs_lease_key(cluster, TICK_LEASE), self.owner, ttl_ms):
                continue
            try:
                rows = await check_expiration(cluster, self.store, now)
            except PkiNotReady:
                continue  # planned, PKI not issued yet
            view = await self.ops.view(cluster)
            holder = await operation_holder(self.redis, cluster)  # one operation per cluster
            if holder is not None:
                view = replace(view, busy=refusal(cluster, holder))
            decision = auto_renew_decision(rows, now, self.within, view)
            out[cluster] = decision
            ids = {"cluster": cluster, "operation": "auto-renew", "due": len(decision.due)}
            if decision.action == "skip":
                log.info("automatic renewal postponed: %s", decision.reason, extra=ids)
            elif decision.action == "renew":
                rid = auto_request_id(now)
                req = RenewCerts(request_id=rid, cluster=cluster, within_days=self.within.total_seconds() / 86400,
                                     origin="auto")
                await self.ops.set_pending(cluster, rid)  # the next tick must not ask again
                await self.publish(req.to_bytes(), RENEW_CERTS, {"Nats-Msg-Id": f"renew:{cluster}:{rid}"})
                log.info("automatic renewal requested: %s", decision.reason, extra={**ids, "request_id": rid})
        return out
