"""Reset and delete, registered: its loop on a runner, started by `bke.v1.cluster.reset`."""
from __future__ import annotations

from bke.adapters.operation import Operations
from bke.contracts.reset import RESET_CLUSTER, ResetCluster

from ..deps import Deps
from ..rotation.run import RotationStore
from .run import Resets, ResetStore
from .snapshot_key import DispatcherSnapshotKey

__all__ = ["wire"]


def wire(d: Deps, ops: Operations) -> Resets:
    resets = Resets(ResetStore(d.redis), RotationStore(d.redis), d.state, d.plans, d.paused,
                    DispatcherSnapshotKey(d.redis), d.svc.publish, d.now, d.owner, d.lease_ms, sign=d.sign)
    # not held by a pause: a reset refuses to start on a paused cluster, and a delete's end must not wait
    ops.drive(resets)
    d.subscribe(RESET_CLUSTER, "BKE_COMMANDS", "dispatcher-resets", ResetCluster, resets.on_request)
    return resets
