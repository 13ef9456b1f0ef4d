"""The upgrader's adapters, each operation's: the lab's stand-ins or the cluster's API and
httpRepo, the other services asked over the bus (the agents' facts, status, expiry, the VRRP
password), the deployment's snapshot key, and the install's addons and labels work as steps."""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from bke.adapters.bus.service import Service
from bke.adapters.checksums import HttpRepoChecksums
from bke.lab.standins.checksums import LabChecksums
from bke.adapters.cluster_api.addons import AddonsWork
from bke.lab.standins.addons import LabApplier
from bke.adapters.cluster_api.manifests import HttpRepoManifests
from bke.lab.standins.manifests import LabManifests
from bke.lab.standins.node_labels import LabNodes
from bke.adapters.cluster_api.node_labels import NodeLabelsWork, NodeMarker
from bke.core.errors import TemporaryError
from bke.core.plan import Plan
from bke.adapters.runner import Outcome
from bke.core.secrets import KeyringFile, box_for, keyring_for
from bke.core.secrets.snapshot_key import SnapshotKey, ensure_snapshot_key
from bke.adapters.state import PlanCache, RedisPlanStore
from bke.adapters.state.record_keys import RecordKeys
from bke.adapters.bus.node_commands import NodeCommandsSender
from bke.adapters.state.keys.trust import etcd_snapshot_key

from ..agent_release import ReleaseSource
from ..certs import UpgradeCerts
from ..membership import ApplyMembership
from ..drain import Drainer, KubernetesDrainer, LabDrainer
from ..facts import LiveFacts
from ..operation import Upgrades
from ..ports import ClusterApi, Commands, Records, RunSettings
from ..renders import Renders
from ..settings import UpgraderSettings
from ..store import UpgradeStore
from ..vrrp_password import VrrpPasswordClient

__all__ = ["Snapshots", "now", "upgrades"]


def now() -> datetime:
    return datetime.now(timezone.utc)


class Snapshots:
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


def upgrades(svc: Service, settings: UpgraderSettings, redis: Any, store: UpgradeStore, plans: PlanCache,
              send: NodeCommandsSender, snapshots: Snapshots) -> Upgrades:
    """The upgrade record's operations, over the lab's stand-ins or the cluster's API and httpRepo."""
    simulated_repo = settings.mode == "lab" and settings.repo_source == "auto"
    drainer, applier, marker = _cluster_api(settings, redis)

    async def request(subject: str, payload: bytes, timeout: float) -> bytes:
        return (await svc.nc.request(subject, payload, timeout=timeout)).data

    # the renderer's (made once per cluster), asked sealed to a key of the request's own
    vrrp_password = VrrpPasswordClient(request, settings.status_timeout_s)
    # the dispatcher's and the certs service's answers (status, the agents' facts, expiry): asked, never read
    facts = LiveFacts(request, now, heartbeat_stale_s=settings.heartbeat_stale_s, timeout_s=settings.status_timeout_s)
    release = ReleaseSource(settings.agent_release, settings.agent_confirm_timeout_s, facts.agents) \
        if settings.agent_release else None
    commands = Commands(svc.publish, None, Renders(vrrp_password, freeze_heap=True),
                        LabChecksums() if simulated_repo else HttpRepoChecksums(), snapshots, release, send=send)
    addons = AddonsWork(redis, applier, now, LabManifests() if simulated_repo else HttpRepoManifests())
    api = ClusterApi(drainer, _AddonsStep(addons), _LabelsStep(NodeLabelsWork(redis, marker, now)))
    run = RunSettings(settings.owner, settings.lease_ms, now, settings.answer_deadline_s, settings.component_timeout_s)
    # a service that never answers fails the step after service_answer_timeout_s (answer_deadline.py)
    timeout_s, clock = settings.service_answer_timeout_s, lambda: now().timestamp()
    # the plan it replaces is signed with the `plan` key, like the planner's (bke.adapters.state.plans)
    plan_store = RedisPlanStore(redis, RecordKeys(redis, {"plan": lambda: box_for("plan")}))
    return Upgrades(Records(store, plans, plan_store, facts), commands, api, run,
                    certs=UpgradeCerts(store, svc.publish, answer_timeout_s=timeout_s, now=clock),
                    membership=ApplyMembership(store, svc.publish, answer_timeout_s=timeout_s, now=clock))


def _cluster_api(settings: UpgraderSettings, redis: Any) -> tuple[Drainer, Any, NodeMarker]:
    """Drains, addons and node marks: recorded by the lab's stand-ins, or through the cluster's API."""
    if settings.mode == "lab" and settings.cluster_api == "auto":
        return LabDrainer(redis, now), LabApplier(), LabNodes()
    from bke.adapters.cluster_api.apply_k8s import KubernetesApplier
    from bke.adapters.cluster_api.k8s_node_marks import KubernetesNodeMarker

    applier = KubernetesApplier(redis)
    return KubernetesDrainer(applier.admin_kubeconfig), applier, KubernetesNodeMarker(applier)


