"""Removing workers, registered: its loop on a runner, started by `RemoveNodes`, draining through
the cluster's API (the lab's stand-in records it instead); a request that fails on every
delivery is answered Failed, not left to its caller's timeout (membership.give_up)."""
from __future__ import annotations

from bke.adapters.drain import Drainer, KubernetesDrainer
from bke.adapters.operation import Operations
from bke.adapters.state.keys.dispatcher import removal_api_key
from bke.contracts.membership import REMOVE_NODES, RemoveNodes
from bke.lab.standins.drain import LabDrainer

from ..deps import Deps
from ..join.run import JoinStore
from ..membership.gates import busy_reader
from ..membership.give_up import answer_given_up
from ..rotation.run import RotationStore
from .run import Removals, RemovalStore

__all__ = ["wire"]


def wire(d: Deps, ops: Operations) -> Removals:
    store = RemovalStore(d.redis)
    busy = busy_reader(d.redis, RotationStore(d.redis), JoinStore(d.redis), store, own="removal")

    drainer: Drainer = LabDrainer(d.redis, d.now, removal_api_key) if d.kubeconfig is None else KubernetesDrainer(d.kubeconfig)
    removals = Removals(store, d.state, d.plans, drainer, busy, d.paused, d.publish, d.now, d.owner, d.lease_ms,
                        sign=d.sign)
    ops.drive(removals)  # not held by a pause: none starts on a paused cluster (refused), one that runs finishes
    gave_up = answer_given_up("removal", store, d.redis, d.publish, d.now, removals.kick)
    d.subscribe(REMOVE_NODES, "BKE_COMMANDS", "dispatcher-removals", RemoveNodes, removals.on_request, give_up=gave_up)
    return removals
