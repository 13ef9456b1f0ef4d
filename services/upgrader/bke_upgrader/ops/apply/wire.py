"""A changed spec, registered: started by `bke.v1.cluster.apply`; its run is the upgrade record's,
on the upgrade's loop (ops/upgrade/wire.py), so nothing else is driven here."""
from __future__ import annotations

from bke.adapters.bus import get_blob
from bke.adapters.bus.handler import typed
from bke.contracts.apply import APPLY_CLUSTER, ApplyCluster
from bke.core.spec.limits import MAX_SPEC_BYTES

from ...operation import Upgrades
from ..deps import Deps
from ..restore.store import RestoreStore
from .run import Applies

__all__ = ["wire"]


def wire(d: Deps, upgrades: Upgrades, restores: RestoreStore) -> Applies:
    svc = d.svc
    applies = Applies(upgrades, d.plans, restores, d.settings.now,
                      lambda ref: get_blob(svc.nc.jetstream(), ref, limit=MAX_SPEC_BYTES))
    # through `typed` like every consumer: the message's form is checked (bke.adapters.bus.message_version)
    svc.work_subscriber(APPLY_CLUSTER, "BKE_COMMANDS", "upgrader-applies",
                        typed(ApplyCluster, applies.on_request, svc.publish, refuse=applies.refuse_bytes), batch_size=4)
    return applies
