"""Renderer wiring: broker, Redis, template sets loaded once, one subscriber. No logic here."""
from __future__ import annotations

from pydantic import ValidationError
from redis.asyncio import Redis

from bke.bus.service import Service, make_service
from bke.contracts import PLAN_CREATED, PlanCreated
from bke.contracts.render import MANIFESTS_RENDERED, RENDER_FAILED, ManifestsRendered, RenderFailed
from bke.errors import MalformedMessage, PermanentError
from bke.render import preload_templates
from bke.render.errors import RenderError
from bke.state import RedisPlanStore

from .service_core import ensure_rendered
from .settings import RendererSettings
from .store_redis import RedisRenderStore

__all__ = ["create_service"]


def create_service(settings: RendererSettings | None = None) -> Service:
    settings = settings or RendererSettings()
    svc = make_service("renderer", settings)
    redis = Redis.from_url(settings.redis_url)
    svc.on_stop.append(redis.aclose)
    plans, store = RedisPlanStore(redis), RedisRenderStore(redis)
    preload_templates()  # every per-version template set, once, at start

    async def on_plan(body: bytes) -> None:
        try:
            ev = PlanCreated.model_validate_json(body)
        except ValidationError as exc:
            raise MalformedMessage(f"malformed plan event: {exc}") from exc
        plan = await plans.load(ev.cluster)
        try:
            report = await ensure_rendered(plan, store)
        except RenderError as exc:
            failed = RenderFailed(request_id=ev.request_id, cluster=ev.cluster, errors=[str(exc)])
            await svc.publish(failed.to_bytes(), RENDER_FAILED, {})
            raise PermanentError(str(exc)) from exc
        out = ManifestsRendered(
            request_id=ev.request_id, cluster=ev.cluster, digest=report.digest, nodes=report.nodes,
            files=report.files, tier=report.tier, template_sets=report.template_sets, warnings=report.warnings,
        )
        await svc.publish(out.to_bytes(), MANIFESTS_RENDERED, {"Nats-Msg-Id": f"rendered:{ev.request_id}:{report.digest}"})

    svc.work_subscriber(PLAN_CREATED, "BKE_EVENTS", "renderer-plans", on_plan, batch_size=4)
    return svc
