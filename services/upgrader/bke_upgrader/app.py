"""Upgrader wiring: the request and result subscribers, the reconcile runner, the view
responder. No logic here (requests.py decides a request, bke.upgrade.run decides each pass)."""
from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timezone
from typing import Any

from pydantic import ValidationError

from bke.bus.handler import typed
from bke.bus.service import REDIS_PROBE_S, Service, make_service
from bke.checksums import HttpRepoChecksums, LabChecksums
from bke.cluster_api.addons import AddonsWork, LabApplier
from bke.cluster_api.manifests import HttpRepoManifests, LabManifests
from bke.contracts.agent import CommandResult
from bke.contracts.status import StatusError
from bke.contracts.upgrade import UPGRADE_CLUSTER, UPGRADE_GET, GetUpgrade, UpgradeCluster
from bke.errors import TemporaryError
from bke.etcdsnap.store import ensure_snapshot_bucket
from bke.plan import Plan
from bke.runner import Runner
from bke.secrets import box_from_env
from bke.secrets.snapshot_key import ensure_snapshot_key
from bke.state import PlanCache, RedisPlanStore
from bke.state.client import redis_client
from bke.state.command_signing import CommandSigning
from bke.state.keys import etcd_snapshot_key
from bke.tasks import cancel_and_wait

from .drain import Drainer, KubernetesDrainer, LabDrainer
from .facts import LiveFacts
from .operation import Upgrades
from .renders import Renders
from .settings import UpgraderSettings
from .store import UpgradeStore

__all__ = ["create_service"]

log = logging.getLogger("bke.upgrader")
GET_QUEUE = "upgrader-get"


def _now() -> datetime:
    return datetime.now(timezone.utc)


class _Snapshots:
    """The snapshot store exists and the deployment's snapshot key is made (SET NX) before the
    first snapshot is asked for: an agent may only add objects, never create the store."""

    def __init__(self, svc: Service, redis: Any):
        self.svc, self.redis = svc, redis
        self._recipient = ""

    async def recipient(self) -> str:
        if not self._recipient:
            await ensure_snapshot_bucket(self.svc.nc.jetstream())
            key = await ensure_snapshot_key(self.redis, etcd_snapshot_key(), box_from_env())
            self._recipient = key.public_b64
        return self._recipient


class _AddonsStep:
    """The upgrade's addons step over the install's addon table and appliers (bke.cluster_api):
    every addon whose version changed is applied again from the target version's manifests."""

    def __init__(self, work: AddonsWork):
        self.work = work

    async def apply(self, old: Plan, new: Plan, rendered: dict[str, str]) -> str:
        outcome = await self.work.run("addons", new, rendered)
        if outcome.status == "failed":
            return outcome.reason or "addons failed"
        if outcome.status == "wait":
            raise TemporaryError(outcome.reason or "addons not ready yet", delay=outcome.delay or 5.0)
        return ""


def create_service(settings: UpgraderSettings | None = None) -> Service:
    settings = settings or UpgraderSettings()
    svc = make_service("upgrader", settings)
    redis = redis_client(settings.store)
    plans = PlanCache(redis)
    lab = settings.mode == "lab"
    simulated_repo = lab and settings.repo_source == "auto"
    drainer: Drainer
    if lab:
        applier = LabApplier()
        drainer = LabDrainer(redis, _now)
    else:
        from bke.cluster_api.apply_k8s import KubernetesApplier

        applier = KubernetesApplier(redis)
        drainer = KubernetesDrainer(applier.admin_kubeconfig)
    addons = _AddonsStep(AddonsWork(redis, applier, _now, LabManifests() if simulated_repo else HttpRepoManifests()))
    signing = CommandSigning(redis, box_from_env)
    store = UpgradeStore(redis)

    async def request(subject: str, payload: bytes, timeout: float) -> bytes:
        return (await svc.nc.request(subject, payload, timeout=timeout)).data

    facts = LiveFacts(redis, request, _now, heartbeat_stale_s=settings.heartbeat_stale_s,
                      timeout_s=settings.status_timeout_s)
    upgrades = Upgrades(store, plans, RedisPlanStore(redis), facts, Renders(),
                        LabChecksums() if simulated_repo else HttpRepoChecksums(), drainer, addons, svc.publish,
                        _now, settings.owner, settings.lease_ms, sign=signing.sign,
                        snapshots=_Snapshots(svc, redis), answer_deadline_s=settings.answer_deadline_s,
                        component_timeout_s=settings.component_timeout_s)
    # A short coalescing window: a pass reads one batch's answers (O(batch)), and an upgrade is
    # ~40 batches in a row, each waiting out the window once after its last answer.
    runner = Runner(upgrades, debounce_s=0.05)
    upgrades.kick = runner.kick

    # through `typed` like every consumer: the message's form is checked (bke.bus.message_version)
    on_request = typed(UpgradeCluster, upgrades.on_request, svc.publish, refuse=upgrades.refuse_bytes)
    svc.work_subscriber(UPGRADE_CLUSTER, "BKE_COMMANDS", "upgrader-requests", on_request, batch_size=16)
    svc.fast_subscriber("bke.v1.agent.*.*.result", "BKE_AGENT", "upgrader-results",
                        typed(CommandResult, upgrades.on_result, svc.publish, svc.notify))

    async def on_get(msg) -> None:  # type: ignore[no-untyped-def]
        if not msg.reply:
            return
        try:
            req = GetUpgrade.model_validate_json(msg.data)
        except ValidationError as exc:
            await msg.respond(StatusError(reason="Invalid", message=f"invalid upgrade request: {exc.errors()[0]['msg']}").to_bytes())
            return
        try:
            v = await upgrades.view_of(req.cluster)
        except Exception as exc:  # noqa: BLE001 - an outage is an answer, not a dead subscription
            await msg.respond(StatusError(reason="Unavailable", cluster=req.cluster, message=f"{type(exc).__name__}: {exc}"[:500]).to_bytes())
            return
        if v is None:
            await msg.respond(StatusError(reason="NotFound", cluster=req.cluster,
                                          message=f"cluster '{req.cluster}': no upgrade").to_bytes())
        else:
            await msg.respond(v.to_bytes())

    background: list[asyncio.Task] = []
    stopping: list[bool] = []

    async def _resume() -> None:
        await svc.retry_while_store_away(upgrades.resume_all, lambda: bool(stopping), log)

    async def _started() -> None:
        await svc.nc.subscribe(UPGRADE_GET, queue=GET_QUEUE, cb=on_get)
        background.append(asyncio.create_task(_resume(), name="upgrader:resume"))

    async def _stopping() -> None:
        stopping.append(True)
        await cancel_and_wait(background, timeout=2 * REDIS_PROBE_S)
        await runner.stop()
        await redis.aclose()

    svc.after_start.append(_started)
    svc.on_stop.insert(0, _stopping)
    return svc
