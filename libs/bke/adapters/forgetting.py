"""A deleted cluster's records, removed by each service that keeps them (bke.contracts.reset).

Why each service removes its own: every service logs into Redis as its own ACL user and may
touch only the key families it owns (bke.adapters.runtime.redis_acl), and no service learns another's
progress from its storage. So `bke.v1.cluster.deleted` goes to every owner with a durable of its
own; each removes what `bke.core.state.schema.RECORDS` says it writes (a record's `writer` names its
service) plus its own indexes, and answers `StateRemoved` naming itself. A redelivery finds
nothing left and answers again with 0 keys.

The same rule for nodes removed from a running cluster (`remove-nodes.finished`): each service
that keeps something per node (certs: agent keys, bundles, PKI; renderer: rendered files) drops
it for the nodes whose removal finished, through `on_nodes_removed`.
"""
from __future__ import annotations

import fnmatch
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from bke.adapters.bus.handler import Out, typed
from bke.contracts.membership import RemoveNodesFinished
from bke.contracts.reset import CLUSTER_DELETED, ClusterDeleted, StateRemoved, removed_subject
from bke.adapters.state.keys.common import cluster_key
from bke.adapters.state.keys.planner import clusters_index, request_key
from bke.adapters.state.keys.dispatcher import installs_index, resets_index, rotations_index
from bke.adapters.state.keys.upgrader import upgrades_index
from bke.contracts.statuses import NodeStatus
from bke.core.state.schema import RECORDS

__all__ = ["INDEXES", "forget_cluster", "on_nodes_removed", "owned_members", "removed_hosts", "serve_deleted"]

log = logging.getLogger("bke.adapters.forgetting")

# The deployment-wide sets of cluster names, by owner (bke.core.state.schema UNVERSIONED).
INDEXES: dict[str, tuple[str, ...]] = {
    "planner": (clusters_index(),),
    "dispatcher": (installs_index(), rotations_index(), resets_index()),
    "upgrader": (upgrades_index(),),
}
SCAN_COUNT = 500


def owned_members(service: str) -> tuple[str, ...]:
    """Names under `bke:<c>:` that `service` writes, from the record table."""
    return tuple(m for kind in RECORDS if kind.writer.startswith(f"{service}:") for m in kind.members)


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


async def forget_cluster(redis: Any, cluster: str, service: str) -> int:
    """Remove `service`'s keys of `cluster`; how many were removed."""
    prefix = cluster_key(cluster, "")
    members = owned_members(service)
    mine = [k async for k in (_s(x) async for x in redis.scan_iter(match=f"{prefix}*", count=SCAN_COUNT))
            if any(fnmatch.fnmatchcase(k[len(prefix):], m) for m in members)]
    if service == "planner":  # request id -> cluster: the requests that named this cluster
        async for raw in redis.scan_iter(match=request_key("*"), count=SCAN_COUNT):
            if _s(await redis.get(raw) or b"") == cluster:
                mine.append(_s(raw))
    removed = int(await redis.delete(*mine)) if mine else 0
    for index in INDEXES.get(service, ()):
        removed += int(await redis.srem(index, cluster))
    return removed


def serve_deleted(svc: Any, redis: Any, now: Callable[[], datetime], after: Callable[[str], None] | None = None) -> None:
    """Subscribe the service to `bke.v1.cluster.deleted` with a durable of its own (each service
    gets every delete; replicas of one service share it). `after(cluster)`: drop what the
    service caches of it."""

    async def on_deleted(ev: ClusterDeleted) -> list[Out]:
        n = await forget_cluster(redis, ev.cluster, svc.name)
        if after is not None:
            after(ev.cluster)
        log.info("records of a deleted cluster removed: %d key(s)", n,
                 extra={"cluster": ev.cluster, "request_id": ev.request_id})
        out = StateRemoved(request_id=ev.request_id, cluster=ev.cluster, service=svc.name, keys=n, at=now().isoformat())
        return [Out(out, removed_subject(ev.cluster), msg_id=f"removed:{svc.name}:{ev.request_id}")]

    svc.work_subscriber(CLUSTER_DELETED, "BKE_EVENTS", f"{svc.name}-deleted", typed(ClusterDeleted, on_deleted, svc.publish))


def removed_hosts(ev: RemoveNodesFinished) -> list[str]:
    """The nodes whose removal reached its end: a removal that failed names only those it
    finished (a node stopped half-way still has its agent, and may be removed again)."""
    return [n.hostname for n in ev.nodes if n.status == NodeStatus.SUCCEEDED]


def on_nodes_removed(service: str, forget: Callable[[str, list[str]], Awaitable[str]],
                     ) -> Callable[[RemoveNodesFinished], Awaitable[list[Out]]]:
    """The `remove-nodes.finished` handler of a service: `forget(cluster, hosts)` drops what the
    service keeps of those nodes (idempotent: a redelivery finds nothing left) and says what it
    dropped, for the log. Nothing is answered."""

    async def on_removed(ev: RemoveNodesFinished) -> list[Out]:
        hosts = removed_hosts(ev)
        if hosts:
            what = await forget(ev.cluster, hosts)
            log.info("removed nodes forgotten by the %s: %d node(s), %s", service, len(hosts), what,
                     extra={"cluster": ev.cluster, "request_id": ev.request_id, "nodes": hosts[:20]})
        return []

    return on_removed
