"""etcd disaster recovery, the adapters: the request in, node commands out, results folded.

Why the upgrader runs it: it already holds what a restore needs: access to the snapshot store
and the deployment's snapshot key (it asks for the snapshots), the command-signing key and the
agents' result stream, and the cluster's "upgrade" lease that keeps one operation's passes from
interleaving with another's. Decisions are bke.core.etcdsnap's (`restore.restore_plan`,
`restore_run.decide`); this module reads, writes and publishes around them:

- `on_request`: checks the request (the etcd cluster exists, the snapshot exists and its record
  is from the agent BKE provisioned for its node), claims the cluster's operation slot (no
  other operation of any kind runs: bke.adapters.state.operation_slot), answers `etcd-restore.accepted`
  (what it stops, every stage) or `.rejected`, and stores the run; a dry run only answers;
- `view_of`: the current or last restore, answered on `bke.v1.etcd-restore.get`;
- `on_result`: records an agent's answer to a restore command beside the run;
- `reconcile`: under the cluster's "upgrade" lease, folds the answers in and carries out the
  next decision (verify the snapshot here, or send a stage's commands), then publishes
  `bke.v1.etcd-restore.<cluster>.changed` with the whole view.

Errors (bke.core.errors): a malformed or impossible request is answered `.rejected` naming its field
or the reason; an outage is retried (the runner's delay); the record moves forward only, so any
process may die at any point and the next pass goes on (fixed command ids).
"""
from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from bke.adapters.bus.handler import Out
from bke.contracts.agent import AgentCommand, CommandResult, agent_subject
from bke.contracts.restore import (
    RESTORE_ACCEPTED,
    RESTORE_REJECTED,
    EtcdRestoreAccepted,
    EtcdRestoreChanged,
    EtcdRestoreRejected,
    EtcdRestoreView,
    GetEtcdRestore,
    RestoreEtcd,
    RestoreNode,
    RestoreStageView,
    restore_subject,
)
from bke.contracts.base import ErrorItem
from bke.contracts.status import StatusError
from bke.core.errors import PermanentError
from bke.core.etcdsnap.records import SnapshotRecord
from bke.core.etcdsnap.restore import STAGES, RestorePlan, node_steps, restore_plan
from bke.core.etcdsnap.restore_run import (
    RestoreDecision,
    RestoreRun,
    awaited_ids,
    decide,
    finish,
    fold_results,
    is_restore_command,
    mark_local,
    mark_sent,
    new_run,
    restore_command_id,
)
from bke.core.etcdsnap.sealed_stream import open_stream
from bke.adapters.etcdsnap.store import check_author
from bke.core.plan import Plan
from bke.adapters.runner import Outcome
from bke.core.secrets.snapshot_key import SnapshotKey
from bke.adapters.state import PlanCache
from bke.adapters.state.keys.plan import plan_key
from bke.adapters.state.lease import claim_lease, release_lease
from bke.adapters.state.operation_slot import claim_operation, operation_holder, release_operation
from bke.adapters.state.operation_slot import refusal as slot_refusal

from .ports import RunSettings
from .requests import refusal_of
from .restore_pieces import PieceServer, provisioned_key
from .restore_store import RestoreStore
from .store import UpgradeStore
from .views import answer_view

__all__ = ["Restores", "Snapshots", "restore_view"]

log = logging.getLogger("bke.upgrader.restore")
Publish = Callable[[bytes, str, dict[str, str]], Awaitable[None]]
Sign = Callable[[AgentCommand], Awaitable[AgentCommand]]
FindSnapshot = Callable[[str, str, str], Awaitable[SnapshotRecord]]
LEASE = "upgrade"  # the upgrade's: one operation's passes at a time per cluster
KIND = "etcd-restore"  # its name in the cluster's operation slot (bke.adapters.state.operation_slot)
WAIT_S = 5.0
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


class Restores:
    def __init__(self, store: RestoreStore, upgrades: UpgradeStore, plans: PlanCache, snapshots: Snapshots,
                 publish: Publish, sign: Sign, settings: RunSettings) -> None:
        self.store, self.upgrades, self.plans = store, upgrades, plans
        self.find, self.key, self.pieces = snapshots.find, snapshots.key, snapshots.pieces
        self.publish, self.sign, self.now = publish, sign, settings.now
        # the upgrade's lease and deadlines (one operation's passes at a time per cluster)
        self.owner, self.lease_ms = settings.owner, settings.lease_ms
        self.answer_deadline_s, self.component_timeout_s = settings.answer_deadline_s, settings.component_timeout_s
        self.kick: Callable[[str], None] = lambda cluster: None

    def _ts(self) -> str:
        return self.now().isoformat()

    # requests ---------------------------------------------------------------
    async def on_request_bytes(self, body: bytes) -> list[Out]:
        try:
            req = RestoreEtcd.model_validate_json(body)
        except ValidationError as exc:
            # the upgrade request's rule: ids read only as strings, every wrong field named
            rid, cluster, errors = refusal_of(body, exc)
            return [Out(EtcdRestoreRejected(request_id=rid, cluster=cluster, message=f"invalid etcd restore request: {errors}"),
                        RESTORE_REJECTED)]
        return await self.on_request(req)

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
        if not await self.store.r.exists(plan_key(req.cluster)):
            return rejected(f"cluster: no cluster {req.cluster!r} is stored in this deployment")
        try:
            plan = await self.plans.load(req.cluster)
        except PermanentError as exc:
            return rejected(f"cluster {req.cluster!r}: {exc}")
        try:
            rp = restore_plan(plan, req.etcd_cluster, req.snapshot_id)
        except KeyError as exc:
            return rejected(f"etcdCluster: {exc.args[0]}")
        try:
            record = await self.find(req.cluster, req.etcd_cluster, req.snapshot_id)
            check_author(record, await self.key(), await provisioned_key(self.store.r, req.cluster, record.node))
        except PermanentError as exc:
            return rejected(f"snapshotId: {exc}")
        # one operation per cluster (bke.adapters.state.operation_slot): a quick answer naming what runs,
        # for a dry run too; the claim below is the atomic one
        holder = await operation_holder(self.store.r, req.cluster)
        if holder is not None and (holder.kind, holder.request_id) != (KIND, req.request_id):
            return rejected(slot_refusal(req.cluster, holder))
        answer = EtcdRestoreAccepted(
            request_id=req.request_id, cluster=req.cluster, etcd_cluster=req.etcd_cluster,
            snapshot_id=req.snapshot_id, revision=record.revision, taken_at=record.taken_at, token=rp.token,
            stops=rp.stops(), stages=_stage_views(rp), dry_run=req.dry_run)
        if req.dry_run:
            return [Out(answer, RESTORE_ACCEPTED)]
        run = new_run(req.request_id, rp, record.sha256, record.size, self._ts())

        def refuse(cur: RestoreRun | None) -> str:
            if cur is not None and cur.status == "Running":
                now = cur.stage_now()
                return (f"etcd restore {cur.restore_id} of {cur.etcd_cluster} in {req.cluster} is still running "
                        f"(stage {now.name if now else '-'}): one operation per cluster")
            return ""

        claim = await claim_operation(self.store.r, req.cluster, KIND, req.request_id, self._ts(), req.etcd_cluster)
        if not claim.won:
            return rejected(claim.refusal(req.cluster))
        why = await self.store.start(run, refuse)  # (a restore record left Running without a claim)
        if why:
            await release_operation(self.store.r, req.cluster, KIND, req.request_id)
            return rejected(why)
        log.info("etcd restore accepted: %s from %s", req.etcd_cluster, req.snapshot_id, extra=ids)
        self.kick(req.cluster)
        return [Out(answer, RESTORE_ACCEPTED, f"etcd-restore-accepted:{req.request_id}"),
                Out(EtcdRestoreChanged(cluster=req.cluster, at=self._ts(), restore=restore_view(run)),
                    restore_subject(req.cluster))]

    # results ----------------------------------------------------------------
    async def on_result(self, res: CommandResult, untrusted: str) -> None:
        """`untrusted`: why the result is not believed ("" if it is; the upgrade's own rule)."""
        if not is_restore_command(res.command_id):
            return
        if untrusted:
            log.warning("etcd restore result dropped: %s", untrusted,
                        extra={"cluster": res.cluster, "node": res.node, "command_id": res.command_id})
            return
        failed = next((s for s in res.steps if s.status == "Failed"), None)
        await self.store.record_result(res, failed.id if failed else "",
                                       (failed.stderr or failed.stdout) if failed else "")
        self.kick(res.cluster)

    # the run ----------------------------------------------------------------
    async def reconcile(self, cluster: str) -> Outcome:
        if not await claim_lease(self.store.r, cluster, LEASE, self.owner, self.lease_ms):
            return Outcome("wait", 1.0, "another upgrader holds the lease")
        try:
            out = await self._reconcile(cluster)
            if out.status != "wait":  # the restore has ended (or there is none): its slot goes
                await self.release_if_over(cluster)
            return out
        finally:
            await release_lease(self.store.r, cluster, LEASE, self.owner)

    async def release_if_over(self, cluster: str) -> None:
        """Free the slot of the cluster's last restore if it has ended (idempotent: every end and
        every resume, so that a crash between the end and the release heals)."""
        run = await self.store.load(cluster)
        if run is not None and run.status != "Running":
            await release_operation(self.store.r, cluster, KIND, run.restore_id)

    async def _reconcile(self, cluster: str) -> Outcome:
        run = await self.store.load(cluster)
        if run is None or run.status != "Running":
            return Outcome("done")
        answers = await self.store.results(cluster, awaited_ids(run))
        changed = fold_results(run, answers, self.now().timestamp(), self.answer_deadline_s)
        if changed:
            # saved before the next stage's commands go out: a member's agent asks for the
            # snapshot as soon as it has its command, and the piece server reads this record
            await self.store.save(run)
        plan = await self.plans.load(cluster)
        rp = restore_plan(plan, run.etcd_cluster, run.snapshot_id)
        for _ in range(len(STAGES) + 2):  # every decision that needs no answer is taken in this pass
            d = decide(run)
            if d.action in ("wait", "done"):
                break
            changed = True
            if d.action in ("succeed", "fail"):
                finish(run, d.action == "succeed", self._ts(), d.reason)
                self.pieces.forget(run.restore_id)
                log.log(logging.INFO if d.action == "succeed" else logging.WARNING, "etcd restore %s%s",
                        run.status.lower(), f": {d.reason}" if d.reason else "",
                        extra={"cluster": cluster, "request_id": run.restore_id})
                break
            await self._carry_out(run, d, plan, rp)
            await self.store.save(run)  # each fact as soon as it is one
            if d.action == "send" and d.hosts:
                break  # answers come later
        if changed:
            await self.store.save(run)
            if run.status != "Running":  # ended: its slot goes before the end is announced
                await release_operation(self.store.r, cluster, KIND, run.restore_id)
            await self.publish(EtcdRestoreChanged(cluster=cluster, at=self._ts(), restore=restore_view(run)).to_bytes(),
                               restore_subject(cluster), {})
        if run.status == "Failed":
            return Outcome("failed", reason=run.message)
        return Outcome("done") if run.status == "Succeeded" else Outcome("wait", WAIT_S)

    async def _carry_out(self, run: RestoreRun, d: RestoreDecision, plan: Plan, rp: RestorePlan) -> None:
        stage = d.stage
        assert stage is not None
        if d.action == "local":  # verify-snapshot: before anything stops
            why = await self._verify(run)
            mark_local(stage, not why, run, why)
            return
        now = self.now()
        expires = datetime.fromtimestamp(now.timestamp() + COMMAND_TTL_S, tz=now.tzinfo).isoformat()
        for host in d.hosts:
            steps = node_steps(plan, rp, stage.name, host, restore_id=run.restore_id, sha256=run.sha256,
                               size=run.size, timeout_s=self.component_timeout_s)
            cid = restore_command_id(run.cluster, run.restore_id, stage.name, host)
            cmd = await self.sign(AgentCommand(command_id=cid, cluster=run.cluster, node=host,
                                               phase=f"etcd-restore:{stage.name}", issued_at=now.isoformat(),
                                               expires_at=expires, steps=steps, issuer="upgrader"))
            # published before the record says sent: a crash in between publishes the same id
            # again, which JetStream drops and an agent that completed it only replays
            await self.publish(cmd.to_bytes(), agent_subject(run.cluster, host, "command"), {"Nats-Msg-Id": cid})
        mark_sent(stage, now.timestamp())
        log.info("etcd restore stage %s: %d node(s) sent", stage.name, len(d.hosts),
                 extra={"cluster": run.cluster, "request_id": run.restore_id})

    async def _verify(self, run: RestoreRun) -> str:
        """"" when the stored snapshot is the one its record describes, from its node's agent."""
        try:
            record = await self.find(run.cluster, run.etcd_cluster, run.snapshot_id)
            key = await self.key()
            check_author(record, key, await provisioned_key(self.store.r, run.cluster, record.node))
            sealed = await self.pieces.ensure_copy(run, record.object_name)
            digest = await asyncio.to_thread(_sealed_sha256, sealed, key.open)
        except PermanentError as exc:
            return str(exc)
        if digest != record.sha256 or digest != run.sha256:
            return f"snapshot {run.snapshot_id}: its bytes do not match its recorded sha256; nothing was stopped"
        return ""

    async def resume_all(self) -> list[str]:
        resumed = []
        for cluster in await self.store.clusters():
            run = await self.store.load(cluster)
            if run is not None and run.status == "Running":
                self.kick(cluster)
                resumed.append(cluster)
            else:
                await self.release_if_over(cluster)
        return resumed

    async def answer_get(self, data: bytes) -> bytes:
        """The answer to `GetEtcdRestore` (`bke etcd restore status`): the view, or a StatusError
        naming what is wrong (a bad request, no restore, an outage); never an exception."""
        return await answer_view(data, GetEtcdRestore, self.view_of, "etcd restore", _invalid_get)

    async def view_of(self, cluster: str) -> EtcdRestoreView | None:
        """The cluster's current or last restore (`bke etcd restore status`), None if none."""
        run = await self.store.load(cluster)
        return None if run is None else restore_view(run)


def _invalid_get(exc: ValidationError) -> StatusError:
    """A GetEtcdRestore that does not read: every wrong field named."""
    errors = [ErrorItem(path=".".join(str(p) for p in e["loc"]) or "(body)", message=e["msg"][:200])
              for e in exc.errors()[:20]]
    named = "; ".join(f"{e.path}: {e.message}" for e in errors)
    return StatusError(reason="Invalid", message=f"invalid etcd restore status request: {named}"[:1000], errors=errors)


def _stage_views(rp: RestorePlan) -> list[RestoreStageView]:
    return [RestoreStageView(name=s.name, summary=s.summary, nodes=list(rp.nodes(s))) for s in STAGES]


def restore_view(run: RestoreRun) -> EtcdRestoreView:
    summaries = {s.name: s.summary for s in STAGES}
    now = run.stage_now()
    return EtcdRestoreView(
        request_id=run.restore_id, etcd_cluster=run.etcd_cluster, snapshot_id=run.snapshot_id, status=run.status,
        stages=[RestoreStageView(name=s.name, summary=summaries.get(s.name, ""), status=s.status, nodes=s.nodes,
                                 done=len(s.done)) for s in run.stages],
        stage=now.name if now else "", started_at=run.started_at, finished_at=run.finished_at, message=run.message,
        failed=[RestoreNode(hostname=f["hostname"], stage=f["stage"], failed_step=f["failedStep"],
                            stderr=f["stderr"][:500]) for f in run.failed[:50]],
    )
