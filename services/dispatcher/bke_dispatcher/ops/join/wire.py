"""Joining nodes, registered: its loop on a runner, started by `JoinNodes`; a request that fails on
every delivery is answered Failed, not left to its caller's timeout (membership.give_up)."""
from __future__ import annotations

from bke.adapters.operation import Operations
from bke.contracts.membership import JOIN_NODES, JoinNodes

from ..deps import Deps
from ..membership.gates import busy_reader
from ..membership.give_up import answer_given_up
from ..removal.run import RemovalStore
from ..rotation.run import RotationStore
from .run import Joins, JoinStore

__all__ = ["wire"]


def wire(d: Deps, ops: Operations) -> Joins:
    store = JoinStore(d.redis)
    busy = busy_reader(d.redis, RotationStore(d.redis), store, RemovalStore(d.redis), own="join")

    joins = Joins(store, d.state, d.plans, d.files, d.checksums, d.marker, busy, d.paused, d.publish, d.now, d.owner,
                  d.lease_ms, sign=d.sign, agents_deadline_s=d.agents_deadline_s)
    ops.drive(joins)  # not held by a pause: none starts on a paused cluster (refused), one that runs finishes
    gave_up = answer_given_up("join", store, d.redis, d.publish, d.now, joins.kick)
    d.subscribe(JOIN_NODES, "BKE_COMMANDS", "dispatcher-joins", JoinNodes, joins.on_request, give_up=gave_up)
    return joins
