"""Dispatcher wiring: subscribers, the reconcile runner, the health monitor. No logic here."""
from __future__ import annotations

import json
from datetime import datetime, timezone

from bke.state.client import redis_client

from bke.bus.service import Service, make_service
from bke.bus.handler import deprecated, typed
from bke.contracts import PLAN_CREATED, PlanCreated
from bke.contracts.certs import (
    CERTS_FAILED,
    CERTS_ISSUED,
    CERTS_RENEWED,
    CERTS_SEALED,
    CertsFailed,
    CertsIssued,
    CertsRenewed,
    CertsSealed,
)
from bke.contracts.render import MANIFESTS_RENDERED, RENDER_FAILED, ManifestsRendered, RenderFailed
from bke.contracts.agent import AgentRegistered, CommandResult
from bke.contracts.install import RETRY_INSTALL, RetryInstall
from bke.contracts.status import STATUS_GET, STATUS_QUEUE
from bke.contracts.subjects import LEGACY_RETRY_REQUESTED
from bke.state import PlanCache
from bke.state.epoch import watch_epoch
from bke.state.keys import heartbeat_key
from bke.state.nodefiles import RedisNodeFiles

from .addons import AddonsWork, LabApplier
from .checksums import HttpRepoChecksums, LabChecksums
from .engine import Engine
from .health import HealthMonitor
from .results import Inputs
from .rotations import Rotations, RotationStore
from .runner import Runner
from .service_events import ServiceEvents
from .settings import DispatcherSettings
from .state import DispatcherState
from .state_loss import StateLossReaction
from .status import StatusReader, StatusResponder

__all__ = ["create_service"]


def _now() -> datetime:
    return datetime.now(timezone.utc)


def create_service(settings: DispatcherSettings | None = None) -> Service:
    settings = settings or DispatcherSettings()
    svc = make_service("dispatcher", settings)
    redis = redis_client(settings.store)
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
    rotation_store = RotationStore(redis)
    rotations = Rotations(rotation_store, state, plans, files, svc.publish, _now, settings.owner, settings.lease_ms)
    rotation_runner = Runner(rotations, state)  # type: ignore[arg-type]  # same reconcile shape
    rotations.kick = rotation_runner.kick
    inputs = Inputs(state, runner.kick, _now, health.record, on_rotation=rotations.on_result)

    # state lost (bke.state.epoch): stop the loops, fail the running installs; restored: resume
    async def stop_loops() -> None:
        await runner.stop()
        await rotation_runner.stop()

    async def resume() -> list[str]:
        return await runner.resume_all() + await rotations.resume_all()

    loss = StateLossReaction(state, svc.publish, _now, stop_loops, resume)
    epoch = watch_epoch(svc, redis, interval_s=settings.epoch_check_s, on_lost=loss.on_lost,
                        on_restored=loss.on_restored, on_intact=loss.on_intact)
    status = StatusResponder(StatusReader(redis, plans, rotation=rotation_store.rotation_view), guard=epoch.ensure_intact)

    services = ServiceEvents(state, plans, engine, runner.kick, _now)

    async def on_heartbeat(msg) -> None:
        if epoch.lost:  # nothing is written into a store that lost its state
            return
        try:
            hb = json.loads(msg.data)
            await redis.hset(heartbeat_key(hb["cluster"]), hb["node"], hb["at"])
        except (ValueError, KeyError, TypeError):
            return  # a heartbeat is advisory; a malformed one is dropped

    b = settings.batch_size
    def t(model, handler):
        return typed(model, handler, svc.publish, svc.notify)

    svc.work_subscriber(PLAN_CREATED, "BKE_EVENTS", "dispatcher-plans", t(PlanCreated, services.plan_created), batch_size=b)
    svc.work_subscriber(MANIFESTS_RENDERED, "BKE_EVENTS", "dispatcher-rendered", t(ManifestsRendered, services.rendered),
                        batch_size=b)
    svc.work_subscriber(RENDER_FAILED, "BKE_EVENTS", "dispatcher-render-failed", t(RenderFailed, services.render_failed),
                        batch_size=b)
    svc.work_subscriber(CERTS_ISSUED, "BKE_EVENTS", "dispatcher-certs-issued", t(CertsIssued, services.certs_issued),
                        batch_size=b)
    svc.work_subscriber(CERTS_FAILED, "BKE_EVENTS", "dispatcher-certs-failed", t(CertsFailed, services.certs_failed),
                        batch_size=b)
    # one per sealed batch or registration: thousands per big install, so the lean consumer
    svc.fast_subscriber(CERTS_SEALED, "BKE_EVENTS", "dispatcher-certs-sealed", t(CertsSealed, services.certs_sealed))
    svc.fast_subscriber("bke.v1.agent.*.*.result", "BKE_AGENT", "dispatcher-results", t(CommandResult, inputs.result))
    svc.fast_subscriber("bke.v1.agent.*.*.registered", "BKE_AGENT", "dispatcher-agents", t(AgentRegistered, inputs.registered))
    retry = t(RetryInstall, inputs.retry)
    svc.work_subscriber(RETRY_INSTALL, "BKE_COMMANDS", "dispatcher-retry", retry, batch_size=b)
    svc.work_subscriber(LEGACY_RETRY_REQUESTED, "BKE_COMMANDS", "dispatcher-retry-legacy",
                        deprecated(LEGACY_RETRY_REQUESTED, RETRY_INSTALL, retry), batch_size=b)
    svc.work_subscriber(CERTS_RENEWED, "BKE_EVENTS", "dispatcher-rotations", t(CertsRenewed, rotations.on_renewed), batch_size=b)

    async def on_status(msg) -> None:
        if msg.reply:  # a publish without a reply inbox asks nothing
            await msg.respond(await status.answer(msg.data))

    core_subs = []

    async def _started() -> None:
        nc = svc.nc
        core_subs.append(await nc.subscribe("bke.v1.heartbeat.>", cb=on_heartbeat))
        # core request/reply; the queue group shares requests between replicas
        core_subs.append(await nc.subscribe(STATUS_GET, queue=STATUS_QUEUE, cb=on_status))
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
