"""Certificate rotation, registered: its loop on a runner a pause holds, started by `certs renewed`."""
from __future__ import annotations

from bke.adapters.operation import Operations
from bke.contracts.certs import CERTS_RENEWED, CertsRenewed

from ..deps import Deps
from .run import Rotations, RotationStore

__all__ = ["wire"]


def wire(d: Deps, ops: Operations) -> Rotations:
    rotations = Rotations(RotationStore(d.redis), d.state, d.plans, d.files, d.svc.publish, d.now, d.owner, d.lease_ms,
                          sign=d.sign)
    ops.drive(rotations, paused=d.paused)  # paused: no node gets its command until resumed
    d.subscribe(CERTS_RENEWED, "BKE_EVENTS", "dispatcher-rotations", CertsRenewed, rotations.on_renewed)
    return rotations
