"""etcd restore, the adapters: its start on `bke.v1.etcd.restore`, its carriers on the one loop
(bke.adapters.operation), its answers and its view. Decisions are bke.core.etcdsnap's
(`restore.restore_plan`, `restore_run.decide`, read through `decide.next_step`).

Why the upgrader runs it: it already holds what a restore needs: access to the snapshot store
and the deployment's snapshot key (it asks for the snapshots), node commands through the
dispatcher (bke.contracts.node_commands), and the cluster's "upgrade" lease that keeps one operation's passes from
interleaving with another's.

    on_request     checks the request (the etcd cluster exists, the snapshot exists and its
                   record is from the agent BKE provisioned for its node), claims the cluster's
                   operation slot, answers `etcd-restore.accepted` (what it stops, every stage)
                   or `.rejected`, and stores the run; a dry run only answers
    on_result      an agent's answer, believed by the upgrade's rule (bke_upgrader.results)
    carriers       one row per stage (restore.STAGES): `verify-snapshot` here, before anything
                   stops; every other stage one command to each of its nodes
    answer_get     the current or last restore, on `bke.v1.etcd-restore.get`

Errors (bke.core.errors): a malformed or impossible request is answered `.rejected` naming its field
or the reason; an outage is retried (the runner's delay); the record moves forward only, so any
process may die at any point and the next pass goes on (fixed command ids).
"""
from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from pydantic import ValidationError

from bke.adapters.bus.handler import Out
from bke.adapters.etcdsnap.store import check_author
from bke.adapters.bus.node_commands import SendCommands
from bke.adapters.operation import OperationLoop, Publish
from bke.adapters.state import PlanCache
from bke.adapters.state.command_signing import Sign
from bke.adapters.state.keys.plan import plan_key
from bke.adapters.state.operation_slot import claim_operation, operation_holder, release_operation
from bke.adapters.state.operation_slot import refusal as slot_refusal
from bke.contracts.agent import CommandResult
from bke.contracts.base import Message
from bke.contracts.operation_ref import OperationRef
from bke.contracts.restore import (
    RESTORE_ACCEPTED, RESTORE_REJECTED, EtcdRestoreAccepted, EtcdRestoreChanged, EtcdRestoreRejected,
    EtcdRestoreView, GetEtcdRestore, RestoreEtcd, restore_subject,
)
from bke.core.errors import PermanentError
from bke.core.etcdsnap.records import SnapshotRecord
from bke.core.etcdsnap.restore import STAGES, node_steps, restore_plan
from bke.core.etcdsnap.restore_run import (
    RestoreRun, StageRun, fold_results, mark_local, mark_sent, new_run, restore_command_id,
)
from bke.core.etcdsnap.sealed_stream import open_stream
from bke.core.operation import Act, Answers, Decision, Fail, Succeed
from bke.core.secrets.snapshot_key import SnapshotKey

from ...ports import RunSettings
from ...requests import refusal_of
from ...results import untrusted_result
from ...store import UpgradeStore
from ...views import answer_view
from .decide import invalid_get, next_step, restore_view, stage_views
from .pieces import PieceServer, provisioned_key
from .store import RestoreStore

__all__ = ["KIND", "Restores", "Snapshots"]

log = logging.getLogger("bke.upgrader.restore")
FindSnapshot = Callable[[str, str, str], Awaitable[SnapshotRecord]]
LEASE = "upgrade"  # the upgrade's: one operation's passes at a time per cluster
KIND = "etcd-restore"  # its name in the cluster's operation slot (bke.adapters.state.operation_slot)
COMMAND_TTL_S = 3600.0


def _sealed_sha256(path: Path, opener: Callable[[bytes], bytes]) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for piece in open_stream(f.read, opener):
            digest.update(piece)
    return digest.hexdigest()


@dataclass(frozen=True)
class Snapshots:
    """The stored snapshots a restore reads: a snapshot's record by its id, the deployment's
    snapshot key that opens it, and the piece server that delivers it to the members' agents."""

    find: FindSnapshot
    key: Callable[[], Awaitable[SnapshotKey]]
    pieces: PieceServer


class Restores(OperationLoop[RestoreRun]):
    """Starts restores on `bke.v1.etcd.restore`; its loop verifies the snapshot, then runs a stage at a time."""

    store: RestoreStore

    def __init__(self, store: RestoreStore, upgrades: UpgradeStore, plans: PlanCache, snapshots: Snapshots,
                 publish: Publish, sign: Sign | None, settings: RunSettings, send: SendCommands | None = None) -> None:
        carriers = {s.name: self._verify if s.where == "upgrader" else self._send for s in STAGES}
        super().__init__(store, publish, settings.now, settings.owner, settings.lease_ms, None, sign=sign, kind=KIND,
                         carriers=carriers, log=log, issuer="upgrader", lease=LEASE,
                         send=send, decide=next_step)
        # the upgrade's store: its Redis and its count of answers from another incarnation (results.py)
        self.upgrades, self.plans = upgrades, plans
        self.find, self.key, self.pieces = snapshots.find, snapshots.key, snapshots.pieces
        self.answer_deadline_s, self.component_timeout_s = settings.answer_deadline_s, settings.component_timeout_s

    # the loop's hooks -----------------------------------------------------------------
    def fold(self, rec: RestoreRun, answers: Answers) -> bool:
        docs = {cid: {"status": a.status, "step": a.step, "stderr": a.stderr} for cid, a in answers.commands.items()}
        return fold_results(rec, docs, self.now().timestamp(), self.answer_deadline_s)

    def changed(self, rec: RestoreRun, at: str) -> tuple[Message, str]:
        return EtcdRestoreChanged(cluster=rec.cluster, at=at, restore=restore_view(rec)), restore_subject(rec.cluster)

    async def ending(self, rec: RestoreRun, end: Succeed | Fail) -> None:
        self.pieces.forget(rec.restore_id)  # its sealed copy and feeds

    async def on_result(self, res: CommandResult) -> None:
        why = await untrusted_result(self.upgrades, res)  # the upgrade's rule (bke_upgrader.results)
        if why:
            log.warning("etcd restore result dropped: %s", why,
                        extra={"cluster": res.cluster, "node": res.node, "command_id": res.command_id})
            return
        await super().on_result(res)

    # the carriers: one row per stage --------------------------------------------------
    @staticmethod
    def _stage(rec: RestoreRun, d: Act) -> StageRun:
        st = rec.stage_now()
        assert st is not None and st.name == d.action, (st, d)
        return st

    async def _verify(self, rec: RestoreRun, d: Act) -> Decision | None:
        why = await self._verified(rec)
        mark_local(self._stage(rec, d), not why, rec, why)
        return None

    async def _send(self, rec: RestoreRun, d: Act) -> Decision | None:
        st = self._stage(rec, d)
        # saved first: a member's agent asks for the snapshot as soon as it has its command, and
        # the piece server serves only the stage this record is at
        await self.store.save(rec)
        plan = await self.plans.load(rec.cluster)
        rp = restore_plan(plan, rec.etcd_cluster, rec.snapshot_id)
        now = self.now()
        expires = datetime.fromtimestamp(now.timestamp() + COMMAND_TTL_S, tz=now.tzinfo).isoformat()
        for host in d.nodes:
            steps = node_steps(plan, rp, st.name, host, restore_id=rec.restore_id, sha256=rec.sha256,
                               size=rec.size, timeout_s=self.component_timeout_s)
            await self.send_command(rec.cluster, host, restore_command_id(rec.cluster, rec.restore_id, st.name, host),
                                    f"etcd-restore:{st.name}", steps, expires_at=expires,
                                    ref=OperationRef(kind=self.ref_kind, id=rec.restore_id, step=st.name))
        mark_sent(st, now.timestamp())
        log.info("etcd restore stage %s: %d node(s) sent", st.name, len(d.nodes),
                 extra={"cluster": rec.cluster, "request_id": rec.restore_id})
        return None

    async def _verified(self, run: RestoreRun) -> str:
        """"" when the stored snapshot is the one its record describes, from its node's agent."""
        try:
            record = await self.find(run.cluster, run.etcd_cluster, run.snapshot_id)
            key = await self.key()
            check_author(record, key, await provisioned_key(self.store.redis, run.cluster, record.node))
            sealed = await self.pieces.ensure_copy(run, record.object_name)
            digest = await asyncio.to_thread(_sealed_sha256, sealed, key.open)
        except PermanentError as exc:
            return str(exc)
        if digest != record.sha256 or digest != run.sha256:
            return f"snapshot {run.snapshot_id}: its bytes do not match its recorded sha256; nothing was stopped"
        return ""

    # requests -------------------------------------------------------------------------
    async def on_request_bytes(self, body: bytes) -> list[Out]:
        try:
            req = RestoreEtcd.model_validate_json(body)
        except ValidationError as exc:
            # the upgrade request's rule: ids read only as strings, every wrong field named
            rid, cluster, errors = refusal_of(body, exc)
            return [Out(EtcdRestoreRejected(request_id=rid, cluster=cluster, message=f"invalid etcd restore request: {errors}"),
                        RESTORE_REJECTED)]
        return await self.on_request(req)

    async def _checked(self, req: RestoreEtcd) -> tuple[EtcdRestoreAccepted, RestoreRun] | str:
        """What the request restores (the accepted answer and the run), or why it cannot be restored."""
        redis = self.store.redis
        if not await redis.exists(plan_key(req.cluster)):
            return f"cluster: no cluster {req.cluster!r} is stored in this deployment"
        try:
            plan = await self.plans.load(req.cluster)
        except PermanentError as exc:
            return f"cluster {req.cluster!r}: {exc}"
        try:
            rp = restore_plan(plan, req.etcd_cluster, req.snapshot_id)
        except KeyError as exc:
            return f"etcdCluster: {exc.args[0]}"
        try:
            record = await self.find(req.cluster, req.etcd_cluster, req.snapshot_id)
            check_author(record, await self.key(), await provisioned_key(redis, req.cluster, record.node))
        except PermanentError as exc:
            return f"snapshotId: {exc}"
        # one operation per cluster (bke.adapters.state.operation_slot): a quick answer naming what
        # runs, for a dry run too; the claim in `_start` is the atomic one
        holder = await operation_holder(redis, req.cluster)
        if holder is not None and (holder.kind, holder.request_id) != (KIND, req.request_id):
            return slot_refusal(req.cluster, holder)
        answer = EtcdRestoreAccepted(
            request_id=req.request_id, cluster=req.cluster, etcd_cluster=req.etcd_cluster,
            snapshot_id=req.snapshot_id, revision=record.revision, taken_at=record.taken_at, token=rp.token,
            stops=rp.stops(), stages=stage_views(rp), dry_run=req.dry_run)
        return answer, new_run(req.request_id, rp, record.sha256, record.size, self._ts())

    async def _start(self, req: RestoreEtcd, run: RestoreRun) -> str:
        """The run stored in the cluster's operation slot (its etcd cluster named there); the refusal."""

        def refuse(cur: RestoreRun | None) -> str:  # a restore record left Running without a claim
            if cur is not None and cur.running:
                now = cur.stage_now()
                return (f"etcd restore {cur.restore_id} of {cur.etcd_cluster} in {req.cluster} is still running "
                        f"(stage {now.name if now else '-'}): one operation per cluster")
            return ""

        redis = self.store.redis
        claim = await claim_operation(redis, req.cluster, KIND, req.request_id, self._ts(), req.etcd_cluster)
        if not claim.won:
            return claim.refusal(req.cluster)
        why = await self.store.start(run, refuse)
        if why:
            await release_operation(redis, req.cluster, KIND, req.request_id)
        return why

    async def on_request(self, req: RestoreEtcd) -> list[Out]:
        ids = {"cluster": req.cluster, "request_id": req.request_id}

        def rejected(message: str) -> list[Out]:
            log.warning("etcd restore refused: %s", message, extra=ids)
            return [Out(EtcdRestoreRejected(request_id=req.request_id, cluster=req.cluster, message=message),
                        RESTORE_REJECTED, f"etcd-restore-rejected:{req.request_id}")]

        current = await self.store.load(req.cluster)
        if current is not None and current.restore_id == req.request_id and not req.dry_run:
            self.kick(req.cluster)  # a redelivery: that restore exists already
            return []
        checked = await self._checked(req)
        if isinstance(checked, str):
            return rejected(checked)
        answer, run = checked
        if req.dry_run:
            return [Out(answer, RESTORE_ACCEPTED)]
        why = await self._start(req, run)
        if why:
            return rejected(why)
        log.info("etcd restore accepted: %s from %s", req.etcd_cluster, req.snapshot_id, extra=ids)
        self.kick(req.cluster)
        return [Out(answer, RESTORE_ACCEPTED, f"etcd-restore-accepted:{req.request_id}"),
                Out(EtcdRestoreChanged(cluster=req.cluster, at=self._ts(), restore=restore_view(run)),
                    restore_subject(req.cluster))]

    # the view -------------------------------------------------------------------------
    async def answer_get(self, data: bytes) -> bytes:
        """The answer to `GetEtcdRestore` (`bke etcd restore status`): the view, or a StatusError
        naming what is wrong (a bad request, no restore, an outage); never an exception."""
        return await answer_view(data, GetEtcdRestore, self.view_of, "etcd restore", invalid_get)

    async def view_of(self, cluster: str) -> EtcdRestoreView | None:
        """The cluster's current or last restore (`bke etcd restore status`), None if none."""
        run = await self.store.load(cluster)
        return None if run is None else restore_view(run)
