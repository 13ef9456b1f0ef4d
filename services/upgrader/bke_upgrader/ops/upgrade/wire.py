"""The upgrade record's operations, registered: their loop on a runner a pause holds, and the
upgrade's and its retry's requests (a changed spec's: ops/apply)."""
from __future__ import annotations

from bke.adapters.bus.handler import typed
from bke.adapters.bus.responder import serve_requests
from bke.adapters.operation import Operations
from bke.adapters.pausing import serve_pause
from bke.adapters.state.pause import PauseFlags
from bke.contracts.upgrade import RETRY_UPGRADE, UPGRADE_CLUSTER, UPGRADE_GET, UpgradeCluster

from ...operation import Upgrades
from ...retries import Retries
from ..deps import GET_QUEUE, Deps

__all__ = ["wire"]

# A short coalescing window: a pass reads one batch's answers (O(batch)), and an upgrade is ~40
# batches in a row, each waiting out the window once after its last answer.
DEBOUNCE_S = 0.05


def wire(d: Deps, ops: Operations, upgrades: Upgrades) -> None:
    svc = d.svc
    pause_flags = PauseFlags(d.redis, "upgrade")
    runner = ops.drive(upgrades, paused=pause_flags.is_paused, debounce_s=DEBOUNCE_S)
    # the certs service's and the dispatcher's answers wake the pass too
    upgrades.certs.kick = upgrades.membership.kick = runner.kick
    upgrades.kick_at_once = lambda cluster: runner.kick(cluster, at_once=True)
    serve_pause(svc, pause_flags, ops.held_by_pause(), d.settings.now)
    svc.work_subscriber(UPGRADE_CLUSTER, "BKE_COMMANDS", "upgrader-requests",
                        typed(UpgradeCluster, upgrades.on_request, svc.publish, refuse=upgrades.refuse_bytes),
                        batch_size=16)
    d.serve_bytes(RETRY_UPGRADE, "BKE_COMMANDS", "upgrader-retries", Retries(upgrades).on_retry_bytes, batch_size=16)
    serve_requests(svc, UPGRADE_GET, GET_QUEUE, lambda subject, body: upgrades.answer_get(body))
