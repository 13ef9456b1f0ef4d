"""Upgrader wiring: the adapters each operation is given (wiring/adapters.py), each operation's
subscribers and its loop on a runner (ops/: each registers itself), and the answers it hears
(wiring/serve.py). No logic here (requests.py decides a request, bke.core.upgrade.run decides each
pass, carriers.py carries each step)."""
from __future__ import annotations

from bke.adapters.bus.other_incarnation import OtherIncarnation
from bke.adapters.bus.service import Service, make_service
from bke.adapters.forgetting import serve_deleted
from bke.adapters.operation import Operations
from bke.adapters.state import PlanCache
from bke.adapters.state.client import redis_client
from bke.adapters.bus.node_commands import NodeCommandsSender

from .metrics import watch_metrics
from .ops.deps import Deps
from .ops.apply.wire import wire as wire_apply
from .ops.restore.wire import wire as wire_restore
from .ops.upgrade.wire import wire as wire_upgrade
from .pages import upgrader_routes
from .settings import UpgraderSettings
from .store import UpgradeStore
from .wiring.adapters import Snapshots, now, upgrades as make_upgrades
from .wiring.serve import lifecycle, serve_answers, serve_results

__all__ = ["create_service"]


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
    snapshots = Snapshots(svc, redis)
    upgrades = make_upgrades(svc, settings, redis, store, plans, send, snapshots)
    deps = Deps(svc, redis, store, plans, send, upgrades.settings, snapshots.key)
    # the operations on the one loop (ops/): the upgrade record's (an upgrade, a retry, a changed
    # spec: one at a time per cluster, and refused while a restore runs), etcd disaster recovery
    ops = Operations()
    wire_upgrade(deps, ops, upgrades)
    restores = wire_restore(deps, ops)
    serve_deleted(svc, redis, now)  # a deleted cluster: this service's records go (bke.adapters.forgetting)
    wire_apply(deps, upgrades, restores.store)
    serve_answers(svc, upgrades)  # the other services' answers to them
    serve_results(svc, ops)
    lifecycle(svc, redis, ops)
    return svc
