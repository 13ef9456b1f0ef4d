"""etcd restore, registered: its loop on a runner (a pause does not hold it: a restore stops
apiservers and must not be left half way), started by `bke.v1.etcd.restore`, its view and its
snapshot's pieces answered on request."""
from __future__ import annotations

from bke.adapters.bus.responder import serve_requests
from bke.adapters.etcdsnap.store import find_snapshot
from bke.adapters.operation import Operations
from bke.contracts.restore import RESTORE_ETCD, RESTORE_GET, RESTORE_PIECE
from bke.core.etcdsnap.records import SnapshotRecord

from ..deps import GET_QUEUE, Deps
from .pieces import PieceServer
from .run import Restores, Snapshots
from .store import RestoreStore

__all__ = ["wire"]

PIECE_QUEUE = "upgrader-restore-pieces"
DEBOUNCE_S = 0.05  # a stage's answers come together; its next stage goes at once


def wire(d: Deps, ops: Operations) -> Restores:
    svc = d.svc
    store = RestoreStore(d.redis)
    pieces = PieceServer(store, lambda: svc.nc.jetstream(), d.snapshot_key)

    async def find(cluster: str, etcd_cluster: str, snapshot_id: str) -> SnapshotRecord:
        return await find_snapshot(svc.nc.jetstream(), cluster, etcd_cluster, snapshot_id)

    restores = Restores(store, d.store, d.plans, Snapshots(find, d.snapshot_key, pieces), svc.publish, None,
                        d.settings, send=d.send)
    ops.drive(restores, debounce_s=DEBOUNCE_S)
    d.serve_bytes(RESTORE_ETCD, "BKE_COMMANDS", "upgrader-restores", restores.on_request_bytes, batch_size=4)
    serve_requests(svc, RESTORE_GET, GET_QUEUE, lambda subject, body: restores.answer_get(body))
    serve_requests(svc, RESTORE_PIECE.format(cluster="*", node="*"), PIECE_QUEUE, pieces.answer_bytes)
    return restores
