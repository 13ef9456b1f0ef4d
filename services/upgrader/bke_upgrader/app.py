"""Upgrader wiring: the adapters each operation is given, and each operation's subscribers, its
loop on a runner (ops/: each registers itself) and the request/reply responders. No logic here
(requests.py decides a request, bke.core.upgrade.run decides each pass, carriers.py carries each step)."""
from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timezone
from typing import Any

from bke.adapters.bus.handler import typed
from bke.adapters.bus.other_incarnation import OtherIncarnation
from bke.adapters.bus.service import REDIS_PROBE_S, Service, make_service
from bke.adapters.checksums import HttpRepoChecksums
from bke.lab.standins.checksums import LabChecksums
from bke.adapters.cluster_api.addons import AddonsWork
from bke.lab.standins.addons import LabApplier
from bke.adapters.cluster_api.manifests import HttpRepoManifests
from bke.lab.standins.manifests import LabManifests
from bke.lab.standins.node_labels import LabNodes
from bke.adapters.cluster_api.node_labels import NodeLabelsWork, NodeMarker
from bke.contracts.node_commands import NODE_COMMANDS_ANSWERED, NodeCommandAnswered, NodeCommandsAnswered
from bke.contracts.certs import CERTS_FAILED, CERTS_ISSUED, CERTS_RENEWED, CertsFailed, CertsIssued, CertsRenewed
from bke.contracts.membership import JOIN_NODES_FINISHED, REMOVE_NODES_FINISHED, JoinNodesFinished, RemoveNodesFinished
from bke.core.errors import TemporaryError
from bke.core.plan import Plan
from bke.adapters.operation import Operations
from bke.adapters.runner import Outcome
from bke.core.secrets import KeyringFile, box_for, keyring_for
from bke.core.secrets.snapshot_key import SnapshotKey, ensure_snapshot_key
from bke.adapters.state import PlanCache, RedisPlanStore
from bke.adapters.state.record_keys import RecordKeys
from bke.adapters.forgetting import serve_deleted
from bke.adapters.state.client import redis_client
from bke.adapters.bus.node_commands import NodeCommandsSender
from bke.adapters.state.keys.trust import etcd_snapshot_key
from bke.adapters.tasks import cancel_and_wait

from .agent_release import ReleaseSource
from .certs import UpgradeCerts
from .membership import ApplyMembership
from .drain import Drainer, KubernetesDrainer, LabDrainer
from .facts import LiveFacts
from .metrics import watch_metrics
from .operation import Upgrades
from .ops.deps import Deps
from .ops.apply.wire import wire as wire_apply
from .ops.restore.wire import wire as wire_restore
from .ops.upgrade.wire import wire as wire_upgrade
from .pages import upgrader_routes
from .ports import ClusterApi, Commands, Records, RunSettings
from .renders import Renders
from .settings import UpgraderSettings
from .store import UpgradeStore
from .vrrp_password import VrrpPasswordClient

__all__ = ["create_service"]

log = logging.getLogger("bke.upgrader")


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
        """The private half: an etcd restore opens the stored snapshot with it (ops/restore/pieces.py)."""
        if self._keys is None:
            self._keys = keyring_for("snapshot")
        return await ensure_snapshot_key(self.redis, etcd_snapshot_key(), self._keys.box())


def _settled(outcome: Outcome, what: str, waits: str) -> str:
    """A local step over the install's own work (bke.adapters.cluster_api): "" when done, the
    reason when it failed; waiting, a TemporaryError (the pass is tried again)."""
    if outcome.status == "failed":
        return outcome.reason or f"{what} failed"
    if outcome.status == "wait":
        raise TemporaryError(outcome.reason or f"{what} {waits}", delay=outcome.delay or 5.0)
    return ""


class _AddonsStep:
    """The upgrade's addons step over the install's addon table and appliers: every addon whose
    version changed is applied again from the target version's manifests."""

    def __init__(self, work: AddonsWork):
        self.work = work

    async def apply(self, old: Plan, new: Plan, rendered: dict[str, str], only: str | None = None) -> str:
        return _settled(await self.work.run("addons", new, rendered, only), "addons", "not ready yet")


class _LabelsStep:
    """A changed spec's labels step over the install's node-labels code: the registered nodes get
    the new plan's labels and taints, recorded as the install does."""

    def __init__(self, work: NodeLabelsWork):
        self.work = work

    async def apply(self, plan: Plan) -> str:
        return _settled(await self.work.run("apply-labels", plan), "labels", "not applied yet")


def create_service(settings: UpgraderSettings | None = None) -> Service:
    settings = settings or UpgraderSettings()
    svc = make_service("upgrader", settings)
    redis = redis_client(settings.store)
    plans = PlanCache(redis)
    # node commands go to the dispatcher, which signs and sends them and hears the answers
    # (bke.contracts.node_commands): this service holds no key that commands a node
    send = NodeCommandsSender(svc.publish)
    # answers to a command of another incarnation of their cluster are dropped and counted (bke.adapters.bus.other_incarnation)
    store = UpgradeStore(redis, OtherIncarnation(svc.metrics, svc.name))
    watch_metrics(svc, store)  # /metrics: nodes by state and progress, from the run records
    svc.http_routes += upgrader_routes(store)  # the dashboard: runs, steps, failures (live)
    snapshots = _Snapshots(svc, redis)
    upgrades = _upgrades(svc, settings, redis, store, plans, send, snapshots)
    deps = Deps(svc, redis, store, plans, send, upgrades.settings, snapshots.key)
    # the operations on the one loop (ops/): the upgrade record's (an upgrade, a retry, a changed
    # spec: one at a time per cluster, and refused while a restore runs), etcd disaster recovery
    ops = Operations()
    wire_upgrade(deps, ops, upgrades)
    restores = wire_restore(deps, ops)
    serve_deleted(svc, redis, _now)  # a deleted cluster: this service's records go (bke.adapters.forgetting)
    wire_apply(deps, upgrades, restores.store)
    _serve_answers(svc, upgrades)  # the other services' answers to them
    _serve_results(svc, ops)
    _lifecycle(svc, redis, ops)
    return svc


def _upgrades(svc: Service, settings: UpgraderSettings, redis: Any, store: UpgradeStore, plans: PlanCache,
              send: NodeCommandsSender, snapshots: _Snapshots) -> Upgrades:
    """The upgrade record's operations, over the lab's stand-ins or the cluster's API and httpRepo."""
    simulated_repo = settings.mode == "lab" and settings.repo_source == "auto"
    drainer, applier, marker = _cluster_api(settings, redis)

    async def request(subject: str, payload: bytes, timeout: float) -> bytes:
        return (await svc.nc.request(subject, payload, timeout=timeout)).data

    # the renderer's (made once per cluster), asked sealed to a key of the request's own
    vrrp_password = VrrpPasswordClient(request, settings.status_timeout_s)
    # the dispatcher's and the certs service's answers (status, the agents' facts, expiry): asked, never read
    facts = LiveFacts(request, _now, heartbeat_stale_s=settings.heartbeat_stale_s, timeout_s=settings.status_timeout_s)
    release = ReleaseSource(settings.agent_release, settings.agent_confirm_timeout_s, facts.agents) \
        if settings.agent_release else None
    commands = Commands(svc.publish, None, Renders(vrrp_password, freeze_heap=True),
                        LabChecksums() if simulated_repo else HttpRepoChecksums(), snapshots, release, send=send)
    addons = AddonsWork(redis, applier, _now, LabManifests() if simulated_repo else HttpRepoManifests())
    api = ClusterApi(drainer, _AddonsStep(addons), _LabelsStep(NodeLabelsWork(redis, marker, _now)))
    run = RunSettings(settings.owner, settings.lease_ms, _now, settings.answer_deadline_s, settings.component_timeout_s)
    # a service that never answers fails the step after service_answer_timeout_s (answer_deadline.py)
    timeout_s, clock = settings.service_answer_timeout_s, lambda: _now().timestamp()
    # the plan it replaces is signed with the `plan` key, like the planner's (bke.adapters.state.plans)
    plan_store = RedisPlanStore(redis, RecordKeys(redis, {"plan": lambda: box_for("plan")}))
    return Upgrades(Records(store, plans, plan_store, facts), commands, api, run,
                    certs=UpgradeCerts(store, svc.publish, answer_timeout_s=timeout_s, now=clock),
                    membership=ApplyMembership(store, svc.publish, answer_timeout_s=timeout_s, now=clock))


def _cluster_api(settings: UpgraderSettings, redis: Any) -> tuple[Drainer, Any, NodeMarker]:
    """Drains, addons and node marks: recorded by the lab's stand-ins, or through the cluster's API."""
    if settings.mode == "lab" and settings.cluster_api == "auto":
        return LabDrainer(redis, _now), LabApplier(), LabNodes()
    from bke.adapters.cluster_api.apply_k8s import KubernetesApplier
    from bke.adapters.cluster_api.k8s_node_marks import KubernetesNodeMarker

    applier = KubernetesApplier(redis)
    return KubernetesDrainer(applier.admin_kubeconfig), applier, KubernetesNodeMarker(applier)


def _serve_answers(svc: Service, upgrades: Upgrades) -> None:
    """The dispatcher's answers to a changed spec's removals and joins, and the certs service's
    to an upgrade's renewal or a changed spec's re-issue (others' are ignored)."""
    membership, certs = upgrades.membership, upgrades.certs
    answers: list[tuple[str, str, Any, Any]] = [
        (JOIN_NODES_FINISHED, "upgrader-joins-finished", JoinNodesFinished, membership.on_finished),
        (REMOVE_NODES_FINISHED, "upgrader-removals-finished", RemoveNodesFinished, membership.on_finished),
        (CERTS_ISSUED, "upgrader-certs-issued", CertsIssued, certs.on_issued),
        (CERTS_RENEWED, "upgrader-certs-renewed", CertsRenewed, certs.on_renewed),
        (CERTS_FAILED, "upgrader-certs-failed", CertsFailed, certs.on_failed),
    ]
    for subject, durable, model, handler in answers:
        svc.work_subscriber(subject, "BKE_EVENTS", durable, typed(model, handler, svc.publish, svc.notify))


def _serve_results(svc: Service, ops: Operations) -> None:
    """The agents' answers to this service's commands, as the dispatcher, the one service that
    hears agents, sends them on: believed by its rule, and routed by the operation they answer
    (bke.contracts.operation_ref) to the operation here that runs it. A message's answers are
    handled at once, so an upgrade checks and records them together (its store's one recording)."""

    async def on_answer(ev: NodeCommandAnswered) -> None:
        if not await ops.on_result(ev.operation, ev.result):
            log.warning("an answer to no operation of this service's dropped (%s)", ev.operation.kind,
                        extra={"cluster": ev.result.cluster, "node": ev.result.node, "command_id": ev.result.command_id})

    async def on_answers(ev: NodeCommandsAnswered) -> None:
        # every answer is tried before the message is settled: one that fails (the store away)
        # has the message delivered again, and those recorded already are recorded once
        for got in await asyncio.gather(*(on_answer(a) for a in ev.answers), return_exceptions=True):
            if isinstance(got, BaseException):
                raise got

    svc.fast_subscriber(NODE_COMMANDS_ANSWERED, "BKE_COMMANDS", "upgrader-node-results",
                        typed(NodeCommandsAnswered, on_answers, svc.publish, svc.notify))


def _lifecycle(svc: Service, redis: Any, ops: Operations) -> None:
    """Once started, the running operations resume (waiting for Redis if it is away); at stop,
    the loops end before the store's client closes."""
    background: list[asyncio.Task] = []
    stopping: list[bool] = []

    async def _resume() -> None:
        await svc.retry_while_store_away(ops.resume_all, lambda: bool(stopping), log)

    async def _started() -> None:
        background.append(asyncio.create_task(_resume(), name="upgrader:resume"))

    async def _stopping() -> None:
        stopping.append(True)
        await cancel_and_wait(background, timeout=2 * REDIS_PROBE_S)
        await ops.stop()
        await redis.aclose()

    svc.after_start.append(_started)
    svc.on_stop.insert(0, _stopping)
