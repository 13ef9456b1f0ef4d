"""Dispatcher wiring: subscribers, the reconcile runner, the health monitor. No logic here."""
from __future__ import annotations

import json
from datetime import datetime, timezone

from redis.asyncio import Redis

from bke.bus.service import Service, make_service
from bke.contracts import PLAN_CREATED, PlanCreated
from bke.contracts.certs import CERTS_RENEWED
from bke.contracts.install import RETRY_REQUESTED
from bke.errors import MalformedMessage
from bke.state import PlanCache
from bke.state.keys import cluster_key
from bke.state.nodefiles import RedisNodeFiles

from .addons import AddonsWork, LabApplier
from .checksums import HttpRepoChecksums, LabChecksums
from .engine import Engine
from .health import HealthMonitor
from .results import Inputs
from .rotations import Rotations, RotationStore
from .runner import Runner
from .settings import DispatcherSettings
from .state import DispatcherState

__all__ = ["create_service"]


def _now() -> datetime:
    return datetime.now(timezone.utc)


def create_service(settings: DispatcherSettings | None = None) -> Service:
    settings = settings or DispatcherSettings()
    svc = make_service("dispatcher", settings)
    redis = Redis.from_url(settings.redis_url)
    state = DispatcherState(redis)
    plans = PlanCache(redis)
    files = RedisNodeFiles(redis)
    lab = settings.mode == "lab"
    if not lab:
        from .apply_k8s import KubernetesApplier

        applier = KubernetesApplier(redis)
    else:
        applier = LabApplier()
    engine = Engine(
        state, plans, files, svc.publish,
        LabChecksums() if lab else HttpRepoChecksums(),
        AddonsWork(redis, applier, _now),
        _now, settings.owner, settings.lease_ms, notify=svc.notify,
    )
    runner = Runner(engine, state)
    health = HealthMonitor(state, plans, svc.publish, _now, settings.health_interval_s,
                           pods=None if lab else applier.pod_status)
    rotations = Rotations(RotationStore(redis), state, plans, files, svc.publish, _now, settings.owner, settings.lease_ms)
    rotation_runner = Runner(rotations, state)  # type: ignore[arg-type]  # same reconcile shape
    rotations.kick = rotation_runner.kick
    inputs = Inputs(state, svc.publish, runner.kick, _now, health.record, notify=svc.notify, on_rotation=rotations.on_result)

    async def on_plan(body: bytes) -> None:
        try:
            ev = PlanCreated.model_validate_json(body)
        except ValueError as exc:
            raise MalformedMessage(f"malformed plan event: {exc}") from exc
        plan = await plans.load(ev.cluster)
        if await state.start_install(ev.cluster, ev.request_id, _now().isoformat()):
            await engine.set_total(ev.cluster, plan)
        runner.kick(ev.cluster)

    async def on_heartbeat(msg) -> None:
        try:
            hb = json.loads(msg.data)
            await redis.hset(cluster_key(hb["cluster"], "heartbeat"), hb["node"], hb["at"])
        except (ValueError, KeyError, TypeError):
            return  # a heartbeat is advisory; a malformed one is dropped

    b = settings.batch_size
    svc.work_subscriber(PLAN_CREATED, "BKE_EVENTS", "dispatcher-plans", on_plan, batch_size=b)
    svc.fast_subscriber("bke.v1.agent.*.*.result", "BKE_AGENT", "dispatcher-results", inputs.result)
    svc.fast_subscriber("bke.v1.agent.*.*.registered", "BKE_AGENT", "dispatcher-agents", inputs.registered)
    svc.work_subscriber(RETRY_REQUESTED, "BKE_COMMANDS", "dispatcher-retry", inputs.retry, batch_size=b)
    svc.work_subscriber(CERTS_RENEWED, "BKE_EVENTS", "dispatcher-rotations", rotations.on_renewed, batch_size=b)

    heartbeat_sub = []

    async def _started() -> None:
        nc = svc.nc
        heartbeat_sub.append(await nc.subscribe("bke.v1.heartbeat.>", cb=on_heartbeat))
        await runner.resume_all()
        await rotations.resume_all()
        health.start()

    async def _stopping() -> None:
        await runner.stop()
        await rotation_runner.stop()
        await health.stop()
        await redis.aclose()

    svc.after_start.append(_started)
    svc.on_stop.insert(0, _stopping)
    return svc
