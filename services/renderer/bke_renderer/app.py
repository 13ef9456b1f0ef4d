"""Renderer wiring: broker, Redis, template sets loaded once, three subscribers (plans, render
commands, removed nodes), the VRRP password's request and the dashboard. No logic here
(handlers.py and vrrp_answer.py decide)."""
from __future__ import annotations

from datetime import datetime, timezone

from bke.adapters.forgetting import on_nodes_removed
from bke.adapters.state_service import make_state_service

from bke.adapters.bus.service import Service
from bke.adapters.bus.handler import typed
from bke.adapters.bus.responder import serve_requests
from bke.contracts import PLAN_CREATED, PlanCreated
from bke.contracts.membership import REMOVE_NODES_FINISHED, RemoveNodesFinished
from bke.contracts.render import RENDER_MANIFESTS, RenderManifests
from bke.contracts.vrrp_password import VRRP_PASSWORD_GET, VRRP_PASSWORD_QUEUE
from bke.core.render import preload_templates
from bke.adapters.state import RedisPlanStore
from bke.adapters.state.record_keys import RecordKeys
from bke.core.secrets import keyring_for

from .handlers import RendererHandlers
from .history import RenderHistory
from .pages import renderer_routes
from .settings import RendererSettings
from .store_redis import RedisRenderStore
from .vrrp_answer import vrrp_password_answer

__all__ = ["create_service"]


def create_service(settings: RendererSettings | None = None) -> Service:
    settings = settings or RendererSettings()
    # its Redis; a deleted cluster's records go; a lost state waits for a restore (state_service)
    svc, redis = make_state_service("renderer", settings)
    preload_templates()  # every per-version template set, once, at start
    # every outcome counted and listed for the dashboard (history.py)
    history = RenderHistory(svc.metrics, redis, lambda: datetime.now(timezone.utc))
    svc.http_routes += renderer_routes(history)
    # its file sets signed with the `render` key, read now (a missing file fails at start) and when changed
    store = RedisRenderStore(redis, RecordKeys(redis, {"render": keyring_for("render").box}))
    h = RendererHandlers(plans=RedisPlanStore(redis), store=store, publish=svc.publish, observe=history.observe)
    svc.work_subscriber(PLAN_CREATED, "BKE_EVENTS", "renderer-plans", typed(PlanCreated, h.on_plan, svc.publish),
                        batch_size=4, give_up=h.gave_up)
    svc.work_subscriber(RENDER_MANIFESTS, "BKE_COMMANDS", "renderer-render",
                        typed(RenderManifests, h.on_render_manifests, svc.publish), batch_size=4, give_up=h.gave_up)
    # nodes removed from a running cluster: their rendered files go at once, not at the next render
    svc.work_subscriber(REMOVE_NODES_FINISHED, "BKE_EVENTS", "renderer-removals",
                        typed(RemoveNodesFinished, on_nodes_removed("renderer", store.forget_nodes), svc.publish))
    # the password it made for a cluster's keepalived.conf, sealed to whoever asks (the upgrader)
    serve_requests(svc, VRRP_PASSWORD_GET, VRRP_PASSWORD_QUEUE, vrrp_password_answer(store.stored_vrrp_password))
    return svc
