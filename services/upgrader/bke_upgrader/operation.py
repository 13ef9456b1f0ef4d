"""The upgrade, the adapters: requests in, node commands out, results folded, one pass at a time.

Decisions are bke.core.upgrade's (requests: `decide_request`; the run: `bke.core.upgrade.run.decide`,
read by the loop through ops/upgrade/decide.py);
`Upgrades` holds what a run talks to (ports.py) and the state its parts share, and each part
reads, writes and publishes around those decisions in the module named after it:

- accept.py: `on_request` gathers the live facts, decides, answers `upgrade.accepted` /
  `.rejected`, and stores the run after claiming the cluster's operation slot
  (bke.adapters.state.operation_slot: one operation per cluster, refused naming the install,
  restore, rotation, reset... that runs);
- results.py: `on_result` records an agent's answer to an upgrade command beside the run;
- the pass is the one loop's (bke.adapters.operation.OperationLoop, which `Upgrades` is):
  under the cluster's "upgrade" lease it folds the answers in and carries out the next decision
  by its step's row of the carriers table (carriers.py: a local step; batches.py: a drain, a
  batch of commands, an uncordon), then the end (stored_plan.py); its hooks are ops/upgrade/run.py;
  a pass that finds the run ended releases the slot, and `resume_all` wakes every run after a restart.

Errors (bke.core.errors): a malformed request is answered `upgrade.rejected` naming its field; an
outage or a dispatcher that does not answer yet is retried (TemporaryError); the run's record
moves forward only, so any process may die at any point and the next pass goes on. Any other
error while a pass carries out a decision (a PermanentError, a bug) would only repeat: the run
ends Failed naming its step and node (bke.core.upgrade.failure), the view is published and the
pass returns, which releases the lease.
"""
from __future__ import annotations

import logging
from collections.abc import Callable

from bke.adapters.bus.handler import Out
from bke.adapters.operation import OperationLoop
from bke.adapters.state.operation_slot import operation_holder, start_in_slot
from bke.adapters.state.operation_slot import refusal as slot_refusal
from bke.contracts.agent import CommandResult
from bke.contracts.base import Message
from bke.contracts.upgrade import GetUpgrade, UpgradeChanged, UpgradeCluster, UpgradeView, upgrade_subject
from bke.core.operation import Decision, Fail, Succeed, Wait
from bke.core.plan import Plan
from bke.core.upgrade.run import UpgradeRun

from .accept import accept_upgrade, refuse_upgrade_bytes
from .certs import UpgradeCerts
from .membership import ApplyMembership
from .ops.upgrade import run as upgrade_pass
from .ports import ClusterApi, Commands, Records, RunSettings
from .results import record_result
from .store import UpgradeStore
from .views import answer_view, view

__all__ = ["LEASE", "Upgrades", "slot_kind"]

log = logging.getLogger("bke.upgrader")
LEASE = "upgrade"  # one operation's passes at a time per cluster (an etcd restore's too)


def slot_kind(run: UpgradeRun) -> str:
    """The operation-slot kind of a run of the upgrade record: a changed spec's run (ops/apply)
    holds the slot as an apply, so that a refusal names what runs."""
    return "apply" if run.is_apply else "upgrade"


class Upgrades(OperationLoop[UpgradeRun]):
    store: UpgradeStore  # the record every part reads and writes

    def __init__(self, records: Records, commands: Commands, api: ClusterApi, settings: RunSettings, *,
                 certs: UpgradeCerts | None = None, membership: ApplyMembership | None = None):
        # its commands are signed to bytes and sent by batches.py, with their bindings prefetched
        super().__init__(records.store, commands.publish, settings.now, settings.owner, settings.lease_ms, None,
                         sign=None, kind="upgrade", carriers=upgrade_pass.carriers(self),
                         log=log, issuer="upgrader", lease=LEASE)
        self.records, self.commands, self.api, self.settings = records, commands, api, settings
        # the conversations with the certs service and the dispatcher (their answers come to them)
        self.certs = certs or UpgradeCerts(records.store, commands.publish)
        self.membership = membership or ApplyMembership(records.store, commands.publish)
        # a kick that skips the runner's coalescing window (bke.adapters.runner): the answer that
        # completes the batch in flight has nothing left to coalesce with
        self.kick_at_once: Callable[[str], None] = lambda cluster: None
        # cluster -> the commands of the batch in flight without an answer known here, as the
        # last pass left it: a hint for the result path (the answers of another replica are
        # not in it, and then the ordinary kicks and timers drive the passes as before)
        self.unanswered: dict[str, set[str]] = {}
        # cluster -> (request, stored plan, old plan, target plan): the plans of the last pass
        # (targets.py), or those the request's checks placed (accept.py)
        self.targets: dict[str, tuple[str, Plan, Plan, Plan]] = {}
        self.serving: dict[str, tuple[str, ...]] = {}  # cluster -> the batch the pass carries out now

    def ts(self) -> str:
        return self.settings.now().isoformat()

    # the entry points, each in the module of its part -----------------------------
    def refuse_bytes(self, body: bytes) -> list[Out]:
        return refuse_upgrade_bytes(body)

    async def on_request(self, req: UpgradeCluster) -> list[Out]:
        return await accept_upgrade(self, req)

    async def on_result(self, res: CommandResult) -> None:
        await record_result(self, res)

    # the loop's hooks (ops/upgrade/run.py) ------------------------------------------
    async def folded(self, rec: UpgradeRun) -> bool:
        return await upgrade_pass.folded(self, rec)

    async def decider(self, rec: UpgradeRun) -> Callable[[UpgradeRun], Decision]:
        return await upgrade_pass.decider(self, rec)

    def changed(self, rec: UpgradeRun, at: str) -> tuple[Message, str]:
        """The whole view, to whoever follows the run."""
        return UpgradeChanged(cluster=rec.cluster, at=at, upgrade=view(rec)), upgrade_subject(rec.cluster)

    def slot_kind(self, rec: UpgradeRun) -> str:
        return slot_kind(rec)

    def waited(self, rec: UpgradeRun, wait: Wait) -> bool:
        return upgrade_pass.waited(self, rec, wait)

    async def ending(self, rec: UpgradeRun, end: Succeed | Fail) -> None:
        await upgrade_pass.ending(self, rec, end)

    def failure(self, rec: UpgradeRun, exc: Exception) -> Fail:
        return upgrade_pass.failure(self, rec, exc)

    async def save(self, rec: UpgradeRun) -> None:
        await upgrade_pass.save(self, rec)

    # shared by the operations of the upgrade record (upgrade, retry, apply) ---------
    async def busy(self, cluster: str, kind: str, request_id: str) -> str:
        """Why an operation may not start because another holds the cluster's slot ("" if none
        does, or this very one does). Read only: `start_claimed` claims."""
        holder = await operation_holder(self.store.r, cluster)
        if holder is None or (holder.kind, holder.request_id) == (kind, request_id):
            return ""
        return slot_refusal(cluster, holder)

    async def start_claimed(self, run: UpgradeRun, refuse: Callable[[UpgradeRun | None], str]) -> str:
        """Claim the cluster's operation slot for `run`, then store it: the refusal ("" when
        started). The claim is the one atomic step between kinds (an upgrade, a restore, a
        rotation, a reset...); the record's own WATCH check stays, for an upgrade record left
        Running without a claim (written before the slot existed). The caller answers and
        announces it (its accepted answer first)."""
        return await start_in_slot(self.store.r, run.cluster, slot_kind(run), run.request_id, self.ts(),
                                   lambda: self.store.start(run, refuse))

    async def plan_digest(self, cluster: str) -> str:
        meta = await self.records.plan_store.meta(cluster)
        return meta.digest if meta else ""

    async def view_of(self, cluster: str) -> UpgradeView | None:
        run = await self.store.load(cluster, fresh=True)
        return None if run is None else view(run)

    async def answer_get(self, data: bytes) -> bytes:
        """The answer to `GetUpgrade` (`bke upgrade status`) on `bke.v1.upgrade.get`."""
        return await answer_view(data, GetUpgrade, self.view_of, "upgrade")
