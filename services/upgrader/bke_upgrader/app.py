"""Upgrader wiring: the request and result subscribers, the reconcile runner, the view
responder. No logic here (requests.py decides a request, bke.core.upgrade.run decides each pass)."""
from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timezone
from typing import Any

from pydantic import ValidationError

from bke.adapters.bus import get_blob
from bke.adapters.bus.handler import typed
from bke.adapters.bus.misaddressed import Misaddressed
from bke.adapters.bus.other_incarnation import OtherIncarnation
from bke.adapters.bus.replies import answerable
from bke.adapters.bus.service import REDIS_PROBE_S, Service, make_service
from bke.adapters.checksums import HttpRepoChecksums
from bke.lab.standins.checksums import LabChecksums
from bke.adapters.cluster_api.addons import AddonsWork
from bke.lab.standins.addons import LabApplier
from bke.adapters.cluster_api.manifests import HttpRepoManifests
from bke.lab.standins.manifests import LabManifests
from bke.lab.standins.node_labels import LabNodes
from bke.adapters.cluster_api.node_labels import NodeLabelsWork, NodeMarker
from bke.contracts.agent import CommandResult
from bke.contracts.apply import APPLY_CLUSTER, ApplyCluster
from bke.contracts.certs import CERTS_FAILED, CERTS_ISSUED, CERTS_RENEWED, CertsFailed, CertsIssued, CertsRenewed
from bke.contracts.membership import JOIN_NODES_FINISHED, REMOVE_NODES_FINISHED, JoinNodesFinished, RemoveNodesFinished
from bke.contracts.restore import RESTORE_ETCD, RESTORE_GET, RESTORE_PIECE
from bke.contracts.status import StatusError
from bke.contracts.upgrade import RETRY_UPGRADE, UPGRADE_CLUSTER, UPGRADE_GET, GetUpgrade, UpgradeCluster
from bke.adapters.pausing import serve_pause
from bke.adapters.state.pause import PauseFlags
from bke.core.errors import TemporaryError
from bke.core.etcdsnap.restore_run import is_restore_command
from bke.adapters.etcdsnap.store import find_snapshot
from bke.core.plan import Plan
from bke.adapters.runner import Runner
from bke.core.secrets import KeyringFile, box_for, keyring_for
from bke.core.spec.limits import MAX_SPEC_BYTES
from bke.core.secrets.snapshot_key import SnapshotKey, ensure_snapshot_key
from bke.adapters.state import PlanCache, RedisPlanStore
from bke.adapters.forgetting import serve_deleted
from bke.adapters.state.client import redis_client
from bke.adapters.state.command_signing import CommandSigning
from bke.adapters.state.keys import etcd_snapshot_key, vrrp_password_key
from bke.adapters.tasks import cancel_and_wait
from bke.core.etcdsnap.restore_run import SLUG_PREFIX as RESTORE_SLUG_PREFIX
from bke.core.upgrade.run import SLUG_PREFIX

from .agent_release import ReleaseSource
from .applies import Applies
from .certs import UpgradeCerts
from .membership import ApplyMembership
from .drain import Drainer, KubernetesDrainer, LabDrainer
from .facts import LiveFacts
from .metrics import watch_metrics
from .operation import Upgrades
from .pages import upgrader_routes
from .ports import ClusterApi, Commands, Records, RunSettings
from .renders import Renders
from .restore_pieces import PieceServer
from .restore_store import RestoreStore
from .restores import Restores
from .retries import Retries
from .settings import UpgraderSettings
from .store import UpgradeStore

__all__ = ["create_service"]

log = logging.getLogger("bke.upgrader")
GET_QUEUE = "upgrader-get"
PIECE_QUEUE = "upgrader-restore-pieces"
UPGRADE_MARK = ("/" + SLUG_PREFIX).encode()  # in every upgrade command id (bke.core.upgrade.run.step_slug)
RESTORE_MARK = ("/" + RESTORE_SLUG_PREFIX).encode()  # in every restore command id (bke.core.etcdsnap.restore_run)


def _now() -> datetime:
    return datetime.now(timezone.utc)


class _Snapshots:
    """The deployment's snapshot key is made (SET NX) before the first snapshot is asked for (the
    store itself is declared at deploy time, bke.adapters.bus.streams, and checked when the service starts)."""

    def __init__(self, svc: Service, redis: Any):
        self.svc, self.redis = svc, redis
        self._recipient = ""
        self._keys: KeyringFile | None = None  # the `snapshot` at-rest keys, read at first use

    async def recipient(self) -> str:
        if not self._recipient:
            self._recipient = (await self.key()).public_b64
        return self._recipient

    async def key(self) -> SnapshotKey:
        """The private half: an etcd restore opens the stored snapshot with it (restore_pieces)."""
        if self._keys is None:
            self._keys = keyring_for("snapshot")
        return await ensure_snapshot_key(self.redis, etcd_snapshot_key(), self._keys.box())


class _AddonsStep:
    """The upgrade's addons step over the install's addon table and appliers (bke.adapters.cluster_api):
    every addon whose version changed is applied again from the target version's manifests."""

    def __init__(self, work: AddonsWork):
        self.work = work

    async def apply(self, old: Plan, new: Plan, rendered: dict[str, str], only: str | None = None) -> str:
        outcome = await self.work.run("addons", new, rendered, only)
        if outcome.status == "failed":
            return outcome.reason or "addons failed"
        if outcome.status == "wait":
            raise TemporaryError(outcome.reason or "addons not ready yet", delay=outcome.delay or 5.0)
        return ""


class _LabelsStep:
    """A changed spec's labels step over the install's node-labels code (bke.adapters.cluster_api):
    the registered nodes get the new plan's labels and taints, recorded as the install does."""

    def __init__(self, work: NodeLabelsWork):
        self.work = work

    async def apply(self, plan: Plan) -> str:
        outcome = await self.work.run("apply-labels", plan)
        if outcome.status == "failed":
            return outcome.reason or "labels failed"
        if outcome.status == "wait":
            raise TemporaryError(outcome.reason or "labels not applied yet", delay=outcome.delay or 5.0)
        return ""


def create_service(settings: UpgraderSettings | None = None) -> Service:
    settings = settings or UpgraderSettings()
    svc = make_service("upgrader", settings)
    redis = redis_client(settings.store)
    plans = PlanCache(redis)
    lab = settings.mode == "lab"
    simulated_repo = lab and settings.repo_source == "auto"
    drainer: Drainer
    marker: NodeMarker
    if lab and settings.cluster_api == "auto":
        applier = LabApplier()
        drainer = LabDrainer(redis, _now)
        marker = LabNodes()
    else:
        from bke.adapters.cluster_api.apply_k8s import KubernetesApplier
        from bke.adapters.cluster_api.k8s_node_marks import KubernetesNodeMarker

        applier = KubernetesApplier(redis)
        drainer = KubernetesDrainer(applier.admin_kubeconfig)
        marker = KubernetesNodeMarker(applier)
    addons = _AddonsStep(AddonsWork(redis, applier, _now, LabManifests() if simulated_repo else HttpRepoManifests()))
    signing = CommandSigning(redis, lambda: box_for("signing"))
    # answers to a command of another incarnation of their cluster are dropped and counted (bke.adapters.bus.other_incarnation)
    store = UpgradeStore(redis, OtherIncarnation(svc.metrics, svc.name))
    watch_metrics(svc, store)  # /metrics: nodes by state and progress, from the run records
    svc.http_routes += upgrader_routes(store)  # the dashboard: runs, steps, failures (live)

    async def request(subject: str, payload: bytes, timeout: float) -> bytes:
        return (await svc.nc.request(subject, payload, timeout=timeout)).data

    facts = LiveFacts(redis, request, _now, heartbeat_stale_s=settings.heartbeat_stale_s,
                      timeout_s=settings.status_timeout_s)
    snapshots = _Snapshots(svc, redis)
    # a service that never answers fails the step after service_answer_timeout_s (answer_deadline.py)
    certs = UpgradeCerts(store, svc.publish, answer_timeout_s=settings.service_answer_timeout_s,
                         now=lambda: _now().timestamp())
    membership = ApplyMembership(store, svc.publish, answer_timeout_s=settings.service_answer_timeout_s,
                                 now=lambda: _now().timestamp())

    async def publish(payload: bytes, subject: str, headers: dict[str, str]) -> None:
        # straight on the service's connection: the same message as Service.publish (a core
        # publish that the subject's stream keeps, de-duplicated by its Nats-Msg-Id), without the
        # broker's per-message layers: about 0.3 ms a command in a profile of a 1,000-node upgrade
        await svc.nc.publish(subject, payload, headers=headers or None)

    async def vrrp_password(cluster: str) -> str | None:
        # the renderer's (made once per cluster, bke_renderer.store_redis); read, never written here
        raw = await redis.get(vrrp_password_key(cluster))
        return raw.decode() if isinstance(raw, bytes) else raw

    release = ReleaseSource(settings.agent_release, settings.agent_confirm_timeout_s, redis) if settings.agent_release \
        else None
    commands = Commands(publish, signing.sign_bytes, Renders(vrrp_password, freeze_heap=True),
                        LabChecksums() if simulated_repo else HttpRepoChecksums(), snapshots, release, signing.prefetch)
    api = ClusterApi(drainer, addons, _LabelsStep(NodeLabelsWork(redis, marker, _now)))
    run_settings = RunSettings(settings.owner, settings.lease_ms, _now, settings.answer_deadline_s,
                               settings.component_timeout_s)
    upgrades = Upgrades(Records(store, plans, RedisPlanStore(redis), facts), commands, api, run_settings,
                        certs=certs, membership=membership)
    # etcd disaster recovery (restores.py): the same store access, signing and lease as upgrades
    restore_store = RestoreStore(redis)
    pieces = PieceServer(restore_store, lambda: svc.nc.jetstream(), snapshots.key)
    restores = Restores(restore_store, store, plans, pieces,
                        lambda c, e, sid: find_snapshot(svc.nc.jetstream(), c, e, sid), snapshots.key,
                        svc.publish, signing.sign, _now, settings.owner, settings.lease_ms,
                        answer_deadline_s=settings.answer_deadline_s, component_timeout_s=settings.component_timeout_s)
    restore_runner = Runner(restores, debounce_s=0.05)
    restores.kick = restore_runner.kick
    # A short coalescing window: a pass reads one batch's answers (O(batch)), and an upgrade is
    # ~40 batches in a row, each waiting out the window once after its last answer.
    pause_flags = PauseFlags(redis, "upgrade")
    runner = Runner(upgrades, debounce_s=0.05, paused=pause_flags.is_paused)
    upgrades.kick = certs.kick = membership.kick = runner.kick
    upgrades.kick_at_once = lambda cluster: runner.kick(cluster, at_once=True)
    serve_pause(svc, pause_flags, [runner.kick], _now)
    serve_deleted(svc, redis, _now)  # a deleted cluster: this service's records go (bke.adapters.forgetting)

    # through `typed` like every consumer: the message's form is checked (bke.adapters.bus.message_version);
    # a running restore (or any other operation) refuses it through the cluster's operation slot
    on_request = typed(UpgradeCluster, upgrades.on_request, svc.publish, refuse=upgrades.refuse_bytes)

    retries = Retries(upgrades)
    # a changed spec (applies.py): a run of the same record; refused while a restore runs too
    applies = Applies(upgrades, plans, restore_store, _now,
                      lambda ref: get_blob(svc.nc.jetstream(), ref, limit=MAX_SPEC_BYTES))
    svc.work_subscriber(APPLY_CLUSTER, "BKE_COMMANDS", "upgrader-applies",
                        typed(ApplyCluster, applies.on_request, svc.publish, refuse=applies.refuse_bytes), batch_size=4)

    async def on_retry(body: bytes) -> None:
        for out in await retries.on_retry_bytes(body):
            await svc.publish(out.message.to_bytes(), out.subject, {"Nats-Msg-Id": out.msg_id} if out.msg_id else {})

    svc.work_subscriber(UPGRADE_CLUSTER, "BKE_COMMANDS", "upgrader-requests", on_request, batch_size=16)
    svc.work_subscriber(RETRY_UPGRADE, "BKE_COMMANDS", "upgrader-retries", on_retry, batch_size=16)

    # the dispatcher's answers to a changed spec's removals and joins (others' are ignored)
    svc.work_subscriber(JOIN_NODES_FINISHED, "BKE_EVENTS", "upgrader-joins-finished",
                        typed(JoinNodesFinished, membership.on_finished, svc.publish, svc.notify))
    svc.work_subscriber(REMOVE_NODES_FINISHED, "BKE_EVENTS", "upgrader-removals-finished",
                        typed(RemoveNodesFinished, membership.on_finished, svc.publish, svc.notify))

    # the certs service's answers to an upgrade's renewal or a changed spec's re-issue (others
    # are ignored)
    svc.work_subscriber(CERTS_ISSUED, "BKE_EVENTS", "upgrader-certs-issued",
                        typed(CertsIssued, certs.on_issued, svc.publish, svc.notify))
    svc.work_subscriber(CERTS_RENEWED, "BKE_EVENTS", "upgrader-certs-renewed",
                        typed(CertsRenewed, certs.on_renewed, svc.publish, svc.notify))
    svc.work_subscriber(CERTS_FAILED, "BKE_EVENTS", "upgrader-certs-failed",
                        typed(CertsFailed, certs.on_failed, svc.publish, svc.notify))

    async def on_restore_request(body: bytes) -> None:
        for out in await restores.on_request_bytes(body):
            await svc.publish(out.message.to_bytes(), out.subject, {"Nats-Msg-Id": out.msg_id} if out.msg_id else {})

    async def on_result(res: CommandResult) -> None:
        if is_restore_command(res.command_id):
            # believed by the upgrade's own rule (its node's subject, its accepted agent)
            await restores.on_result(res, await upgrades.untrusted(res))
        else:
            await upgrades.on_result(res)

    svc.work_subscriber(RESTORE_ETCD, "BKE_COMMANDS", "upgrader-restores", on_restore_request, batch_size=4)
    def not_ours(body: bytes) -> bool:
        # Every agent result comes here (installs', rotations', health rounds': a 5,000-node
        # health round every 30 s). One that holds neither an upgrade's nor a restore's command
        # id mark cannot be ours: acknowledged as it arrives, never parsed. One that does is
        # parsed and checked in full, so a mark in some other field only costs the parse.
        return UPGRADE_MARK not in body and RESTORE_MARK not in body

    # a result on another node's subject is dropped and counted (bke.adapters.bus.misaddressed)
    misaddressed = Misaddressed(svc.metrics, svc.name)

    def handle_result(kind: str) -> Any:
        return typed(CommandResult, misaddressed.guard(kind, on_result), svc.publish, svc.notify)

    # An agent answers this service's commands on their own subject (bke.contracts.agent
    # UPGRADER_RESULT); one whose identity predates that subject answers on `result`, read here
    # too, with every other result of the cluster. (Literal subjects: tests/unit/
    # test_auth_permissions.py holds them to bke.adapters.auth.permissions, which spells UPGRADER_RESULT.)
    svc.fast_subscriber("bke.v1.agent.*.*.result", "BKE_AGENT", "upgrader-results", handle_result("result"),
                        skip=not_ours)
    # nothing skipped on its own subject: every message there is meant for this service, and a
    # malformed one is dead-lettered with the reason
    svc.fast_subscriber("bke.v1.agent.*.*.upgrader-result", "BKE_AGENT", "upgrader-answers",
                        handle_result("upgrader-result"))

    async def on_piece(msg) -> None:  # type: ignore[no-untyped-def]
        if answerable(msg):
            await msg.respond((await pieces.answer(msg.subject, msg.data)).to_bytes())

    async def on_get(msg) -> None:  # type: ignore[no-untyped-def]
        if not answerable(msg):
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

    async def on_restore_get(msg) -> None:  # type: ignore[no-untyped-def]
        if answerable(msg):
            await msg.respond(await restores.answer_get(msg.data))

    background: list[asyncio.Task] = []
    stopping: list[bool] = []

    async def _resume() -> None:
        await svc.retry_while_store_away(upgrades.resume_all, lambda: bool(stopping), log)
        await svc.retry_while_store_away(restores.resume_all, lambda: bool(stopping), log)

    async def _started() -> None:
        await svc.nc.subscribe(UPGRADE_GET, queue=GET_QUEUE, cb=on_get)
        await svc.nc.subscribe(RESTORE_GET, queue=GET_QUEUE, cb=on_restore_get)
        await svc.nc.subscribe(RESTORE_PIECE.format(cluster="*", node="*"), queue=PIECE_QUEUE, cb=on_piece)
        background.append(asyncio.create_task(_resume(), name="upgrader:resume"))

    async def _stopping() -> None:
        stopping.append(True)
        await cancel_and_wait(background, timeout=2 * REDIS_PROBE_S)
        await runner.stop()
        await restore_runner.stop()
        await redis.aclose()

    svc.after_start.append(_started)
    svc.on_stop.insert(0, _stopping)
    return svc
