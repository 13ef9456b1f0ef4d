"""Certs wiring: broker, Redis, the `pki` and `api` at-rest keys, the subscribers, the requests
(requests.py), automatic renewal, the dashboard and /metrics, the fork server. No logic here
(handlers.py, autorenew.py and expiration.py decide)."""
from __future__ import annotations

import threading
from datetime import datetime, timezone
from typing import Any

from bke.adapters.state_service import make_state_service

from bke.adapters.bus.service import Service
from bke.adapters.bus.handler import typed
from bke.adapters.bus.flood import FloodWatch
from bke.adapters.bus.misaddressed import Misaddressed
from bke.contracts import PLAN_CREATED, PlanCreated
from bke.contracts.agent import AgentRegistered
from bke.contracts.certs import ISSUE_CERTS, RENEW_CERTS, IssueCerts, RenewCerts
from bke.contracts.install import InstallFinished, install_subject
from bke.contracts.membership import REMOVE_NODES_FINISHED, RemoveNodesFinished
from bke.contracts.rotation import RotationChanged, rotation_subject
from bke.core.pki.issuance import start_fork_server
from bke.core.secrets import keyring_for

from .autorenew import AutoRenewer
from .expiry_view import ExpiryView
from .handlers import CertsHandlers
from .metrics import watch_metrics
from .pages import certs_routes
from .removed_nodes import RemovedNodes
from .requests import serve_certs_requests
from .settings import CertsSettings

__all__ = ["create_service"]


def create_service(settings: CertsSettings | None = None) -> Service:
    settings = settings or CertsSettings()
    # its Redis; a deleted cluster's records go; a lost state waits for a restore (state_service)
    svc, redis = make_state_service("certs", settings)
    # read now (a missing key file fails at start, not at the first message), and again when changed
    pki_keys, api_keys = keyring_for("pki"), keyring_for("api")
    h = CertsHandlers(redis=redis, box_factory=pki_keys.box, api_box_factory=api_keys.box, publish=svc.publish,
                      now=lambda: datetime.now(timezone.utc))
    _subscribe(svc, redis, h)
    auto = AutoRenewer(redis, h.store, h.ops, svc.publish, h.now, settings.renew_interval_s, settings.renew_within_days)
    view = ExpiryView(redis, h.store)  # the dashboard and /metrics: certificates by expiry
    watch_metrics(svc, view, h.now)
    svc.http_routes += certs_routes(view, h.now)

    async def started() -> None:
        # In the background: the first big cluster then finds its worker processes' parent ready.
        threading.Thread(target=start_fork_server, name="certs-fork-server", daemon=True).start()
        auto.start()

    svc.after_start.append(started)
    svc.before_stop.append(auto.stop)
    serve_certs_requests(svc, h)  # expiry, an agent key's provisioning
    return svc


def _subscribe(svc: Service, redis: Any, h: CertsHandlers) -> None:
    def t(model: Any, handler: Any) -> Any:
        return typed(model, handler, svc.publish)

    svc.work_subscriber(PLAN_CREATED, "BKE_EVENTS", "certs-plans", t(PlanCreated, h.on_plan), batch_size=4,
                        give_up=h.gave_up)
    svc.work_subscriber(ISSUE_CERTS, "BKE_COMMANDS", "certs-issue", t(IssueCerts, h.on_issue_certs),
                        batch_size=4, give_up=h.gave_up)
    # a registration on another node's subject is dropped and counted (bke.adapters.bus.misaddressed)
    misaddressed = Misaddressed(svc.metrics, svc.name)
    # every registration counts towards a node's flood (an agent registers once per start): past
    # the bound, one summary per node and window, and the rest dropped unread (bke.adapters.bus.flood)
    floods = FloodWatch(svc.metrics, svc.name, svc.publish, lambda: datetime.now(timezone.utc))
    svc.fast_subscriber("bke.v1.agent.*.*.registered", "BKE_AGENT_OUT", "certs-agents",
                        floods.guard("registered", t(AgentRegistered, misaddressed.guard("registered", h.on_registered)),
                                     every=True), workers=8)
    svc.work_subscriber(RENEW_CERTS, "BKE_COMMANDS", "certs-renew", t(RenewCerts, h.on_renew), batch_size=4)
    svc.work_subscriber(install_subject("*", "finished"), "BKE_EVENTS", "certs-installs",
                        t(InstallFinished, h.on_install_finished))
    svc.work_subscriber(rotation_subject("*"), "BKE_EVENTS", "certs-rotations", t(RotationChanged, h.on_rotation_changed))
    # workers removed: their agent keys, sealed bundles and PKI instances go (removed_nodes)
    svc.work_subscriber(REMOVE_NODES_FINISHED, "BKE_EVENTS", "certs-removals",
                        t(RemoveNodesFinished, RemovedNodes(redis, h.store).on_removed))
