"""Keys several services write by design, each through one adapter: every service that runs
operations claims the operation slot, holds its leases and keeps its own pause flag.

    bke:<c>:operation                    hash    the one operation running: kind, requestId, since
                                                 (claimed by dispatcher, upgrader, certs: bke.adapters.state.operation_slot)
    bke:<c>:lease:<slug>                 string  an operation's lease (dispatcher, upgrader: bke.adapters.state.lease)
    bke:<c>:paused / <c>:upgrade:paused  hash    a person paused the operations  (bke.adapters.state.pause)
"""
from __future__ import annotations

from .common import cluster_key

__all__ = ["lease_key", "operation_key", "paused_key"]


def operation_key(cluster: str) -> str:
    """The cluster's operation slot: which operation runs (bke.adapters.state.operation_slot)."""
    return cluster_key(cluster, "operation")


def lease_key(cluster: str, slug: str) -> str:
    return cluster_key(cluster, "lease", slug)


def paused_key(cluster: str, owner: str) -> str:
    """A person paused the cluster's operations (bke.adapters.state.pause): one flag per service that runs
    operations, in that service's record ("install": the dispatcher's; "upgrade": the upgrader's)."""
    return cluster_key(cluster, "paused") if owner == "dispatcher" else cluster_key(cluster, owner, "paused")
