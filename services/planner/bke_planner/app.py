"""Planner wiring: the broker, Redis, the subscribers (cluster requests, and their older subject;
install outcomes, which decide whether a refused spec may be replaced), the dry run's diff
request (diff_requests.py, served by bke.adapters.bus.responder) and the dashboard. No logic here
(handlers.py and changes.py decide)."""
from __future__ import annotations

from datetime import datetime, timezone
from functools import partial

from bke.adapters.state_service import make_state_service

from bke.adapters.bus import get_blob
from bke.adapters.bus.handler import deprecated, typed
from bke.adapters.bus.service import Service
from bke.contracts import INSTALL_CLUSTER, InstallCluster
from bke.contracts.subjects import LEGACY_CLUSTER_REQUESTED
from bke.contracts.install import InstallFinished, install_subject
from bke.core.spec import MAX_SPEC_BYTES
from bke.adapters.state import RedisPlanStore
from bke.adapters.state.record_keys import RecordKeys
from bke.core.secrets import keyring_for

from .diff_requests import serve_diff
from .handlers import PlannerDeps, handle_install_cluster, handle_install_finished, refuse_request
from .history import PlanHistory
from .pages import planner_routes
from .settings import PlannerSettings

__all__ = ["create_service"]


def create_service(settings: PlannerSettings | None = None) -> Service:
    settings = settings or PlannerSettings()
    # its Redis; a deleted cluster's records go; a lost state waits for a restore (state_service)
    svc, redis = make_state_service("planner", settings)

    async def fetch_blob(ref: str) -> bytes:
        # the same limit as `bke plan`: refused from the object's size before it is read whole
        return await get_blob(svc.nc.jetstream(), ref, limit=MAX_SPEC_BYTES)

    # its plans signed with the `plan` key, read now (a missing file fails at start) and when changed
    plan_keys = RecordKeys(redis, {"plan": keyring_for("plan").box})
    deps = PlannerDeps(store=RedisPlanStore(redis, plan_keys), fetch_blob=fetch_blob, now=lambda: datetime.now(timezone.utc))
    # what it answers is counted and listed for its dashboard (history.py)
    history = PlanHistory(svc.metrics, redis, deps.now)
    svc.http_routes += planner_routes(history, svc.metrics.sample)
    publish = history.watching(svc.publish)
    requested = typed(InstallCluster, partial(handle_install_cluster, deps=deps), publish, refuse=refuse_request)
    finished = typed(InstallFinished, partial(handle_install_finished, deps=deps), svc.publish)
    svc.work_subscriber(INSTALL_CLUSTER, "BKE_COMMANDS", settings.durable, requested, batch_size=settings.batch_size)
    svc.work_subscriber(LEGACY_CLUSTER_REQUESTED, "BKE_COMMANDS", f"{settings.durable}-legacy",
                        deprecated(LEGACY_CLUSTER_REQUESTED, INSTALL_CLUSTER, requested), batch_size=settings.batch_size)
    svc.work_subscriber(install_subject("*", "finished"), "BKE_EVENTS", settings.installs_durable, finished,
                        batch_size=settings.batch_size)
    serve_diff(svc, deps.store, fetch_blob)
    return svc
