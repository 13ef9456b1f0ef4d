"""A changed spec carried out on a running cluster (`bke.v1.cluster.apply`).

The request, decided here: the spec placed (`bke.core.plan`, as an install places it), compared with
the stored plan (`bke.core.lifecycle.diff`: the refusals of `bke apply --dry-run`), and its actions
turned into run steps by the action table (`bke.core.lifecycle.apply_run`). The run is a run of the
upgrade's record (`bke:<c>:upgrade`, request kind "apply"), carried out by `operation.Upgrades`
(the one operation loop: its decide and carriers are the upgrade record's, ops/upgrade) pass by pass: the same fixed command ids, pause, ReplaceFiles with automatic rollback, drains
and compare-and-swap of the stored plan at the end; one operation per cluster follows from the
shared record (an upgrade and an apply cannot both run) and `operation_refusal`.

    on_request -> [ApplyAccepted (+ UpgradeChanged: the run started)] | [ApplyRejected]

A spec larger than one message comes as `specRef` (the object store, as an install's): read with
the install's size limit (MAX_SPEC_BYTES, refused from the object's size before it is read).

Errors: bytes that are no ApplyCluster are answered `apply.rejected` naming each wrong field
(`refuse_bytes`); a `specRef` that is missing, too large or no UTF-8 text is answered
`apply.rejected` naming specRef (a PermanentError of bke.adapters.bus.blobs); a dispatcher that does not answer the status request is a TemporaryError (the
message is redelivered); everything the request gets wrong is an `apply.rejected`.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime

from pydantic import ValidationError

from bke.contracts.statuses import InstallStatus, OperationStatus
from bke.adapters.bus.handler import Out
from bke.contracts.apply import APPLY_ACCEPTED, APPLY_REJECTED, ApplyAccepted, ApplyCluster, ApplyRejected
from bke.contracts.base import ErrorItem
from bke.contracts.changes import ChangeAction
from bke.contracts.status import StatusError
from bke.contracts.upgrade import UpgradeChanged, upgrade_subject
from bke.core.errors import MalformedMessage, PermanentError
from bke.core.secrets.record_signing import RecordKeyError, RecordSignatureError
from bke.core.lifecycle.apply_run import ApplyOrder, apply_order
from bke.core.lifecycle.diff import ClusterDiff, diff_plans, render_diff
from bke.core.plan import Plan, plan_spec_text
from bke.adapters.state import PlanCache, plan_digest
from bke.core.upgrade.run import UpgradeRun, new_run
from bke.core.upgrade.run_request import ApplyRequest

from ...operation import Upgrades
from ...requests import refusal_of, status_refusal, step_views, versions_of
from ...views import view
from ..restore.store import RestoreStore

__all__ = ["APPLY_KIND", "Applies", "operation_refusal"]

log = logging.getLogger("bke.upgrader.apply")
APPLY_KIND = "apply"  # the kind of a changed spec's run's request (bke.core.upgrade.run_request)


async def operation_refusal(cluster: str, status: object, upgrades: Upgrades, restores: RestoreStore) -> str:
    """Why another operation of `cluster` runs ("" when none does): the checks an upgrade request
    makes today (a rotation from the dispatcher's status, an etcd restore, an upgrade or apply in
    the shared record), for records written without a slot claim; the slot itself is claimed
    atomically at the start (`Upgrades.start_claimed`)."""
    rotation = getattr(status, "rotation", None)
    if rotation is not None and rotation.status == OperationStatus.RUNNING:
        return f"a certificate rotation of {cluster} is running ({rotation.done}/{rotation.total} nodes): one operation per cluster"
    restore = await restores.load(cluster)
    if restore is not None and restore.running:
        return f"etcd restore {restore.restore_id} of {restore.etcd_cluster} in {cluster} is running: one operation per cluster"
    return _running(await upgrades.store.load(cluster), cluster)


def _running(cur: UpgradeRun | None, cluster: str) -> str:
    if cur is None or not cur.running:
        return ""
    what = "apply" if cur.is_apply else "upgrade"
    now = cur.step_now()
    return f"{what} {cur.request_id} of {cluster} is still running (step {now.name if now else '-'}): one operation per cluster"


def placed(spec: str) -> Plan | list[ErrorItem]:
    """The spec placed as an install places it, or every error by its field (CPU-bound)."""
    outcome = plan_spec_text(spec, "spec")
    if not outcome.ok or outcome.plan is None:
        return [ErrorItem(path=f"spec.{e.path}" if e.path else "spec", message=e.message) for e in outcome.errors]
    return outcome.plan


def _diff(stored: Plan, desired: Plan) -> ClusterDiff:
    return diff_plans(stored, desired, render_diff(stored, desired))


async def _no_blobs(ref: str) -> bytes:
    raise PermanentError("this upgrader reads no object store")


class Applies:
    def __init__(self, upgrades: Upgrades, plans: PlanCache, restores: RestoreStore, now: Callable[[], datetime],
                 fetch_blob: Callable[[str], Awaitable[bytes]] = _no_blobs):
        self.upgrades, self.plans, self.restores, self.now = upgrades, plans, restores, now
        self.fetch_blob = fetch_blob  # a specRef's bytes, with the install's size limit (app.py)

    async def spec_text(self, req: ApplyCluster) -> str:
        """The request's spec: inline, or read from the object store (PermanentError: missing,
        too large, not text)."""
        if req.spec is not None:
            return req.spec
        data = await self.fetch_blob(req.spec_ref or "")
        try:
            return data.decode()
        except UnicodeDecodeError as exc:
            raise PermanentError(f"the object {req.spec_ref!r} is no UTF-8 text") from exc

    def refuse_bytes(self, body: bytes) -> list[Out]:
        """The answer to bytes that are no ApplyCluster: every wrong field named, never a dead
        letter (the CLI waits for an answer)."""
        try:
            ApplyCluster.model_validate_json(body)
        except ValidationError as exc:
            rid, cluster, message = refusal_of(body, exc)
            req = ApplyRejected(request_id=rid, cluster=cluster, message=message)
        else:  # valid as is but not in the form its header named: that is typed's dead letter
            raise MalformedMessage("an ApplyCluster that does not read in the form its bke-schema header names")
        log.warning("apply request refused: %s", req.message, extra={"request_id": req.request_id})
        return [Out(req, APPLY_REJECTED, f"apply-rejected:{req.request_id}" if req.request_id else None)]

    async def on_request(self, req: ApplyCluster) -> list[Out]:
        current = await self.upgrades.store.load(req.cluster)
        if current is not None and current.request_id == req.request_id:
            self.upgrades.kick(req.cluster)  # a redelivery: that run exists already
            return []
        refused = await self._cluster_refusal(req)
        if refused is not None:
            return _rejected(req, *refused)
        try:
            spec = await self.spec_text(req)
        except PermanentError as exc:
            return _rejected(req, f"specRef: {exc}")
        desired = await asyncio.to_thread(placed, spec)
        if isinstance(desired, list):
            return _rejected(req, "the spec is invalid: " + "; ".join(f"{e.path}: {e.message}" for e in desired[:20]),
                             desired)
        if desired.cluster != req.cluster:
            return _rejected(req, f"spec: names cluster {desired.cluster!r}, the request {req.cluster!r}")
        try:
            stored = await self.plans.load(req.cluster)
        except (RecordSignatureError, RecordKeyError) as exc:
            return _rejected(req, str(exc))  # a plan its writer did not sign is no base for a change
        digest = await self.upgrades.plan_digest(req.cluster)
        diff = await asyncio.to_thread(_diff, stored, desired)
        order = apply_order(stored, desired, diff, None)
        refusals = _refusals(diff, order)
        if refusals:
            return _rejected(req, "; ".join(f"{r.path}: {r.message}" for r in refusals), refusals)
        answer = ApplyAccepted(
            request_id=req.request_id, cluster=req.cluster, stored_digest=digest,
            desired_digest=plan_digest(desired.to_json()),
            actions=[ChangeAction(kind=a.kind, host=a.host, detail=a.detail) for a in diff.actions],
            steps=step_views(order.steps, len(stored.nodes)), dry_run=req.dry_run)
        if req.dry_run or not order.steps:
            return [Out(answer, APPLY_ACCEPTED, f"apply-accepted:{req.request_id}")]
        # the drain's options are set only when the request named them: a record without keeps its bytes
        named = {"drain": req.drain} if req.drain is not None else {}
        return await self._start(req, ApplyRequest(
            kind=APPLY_KIND, request_id=req.request_id, cluster=req.cluster, spec=spec, plan_digest=digest,
            desired_digest=answer.desired_digest, drain_timeout_s=req.drain_timeout_s, **named), stored, order, answer)

    async def _cluster_refusal(self, req: ApplyCluster) -> tuple[str, list[ErrorItem]] | None:
        """Why the cluster takes no changed spec now (its install is not done, another operation
        runs), with the refusals the answer lists; None if it does."""
        status = await self.upgrades.records.facts.status(req.cluster)
        if isinstance(status, StatusError):
            return status_refusal(req.cluster, status), []
        if status.status != InstallStatus.SUCCEEDED:
            return (f"the install of {req.cluster} is {status.status}: a changed spec applies to an installed "
                    "cluster (`bke retry` finishes a failed install)"), []
        busy = (await self.upgrades.busy(req.cluster, APPLY_KIND, req.request_id)
                or await operation_refusal(req.cluster, status, self.upgrades, self.restores))
        if busy and not req.dry_run:
            return busy, [ErrorItem(path="Busy", message=busy)]
        return None

    async def _start(self, req: ApplyCluster, request: ApplyRequest, stored: Plan, order: ApplyOrder,
                     answer: ApplyAccepted) -> list[Out]:
        """The run stored, once the cluster's operation slot (kind "apply", operation.slot_kind) is claimed."""
        versions = versions_of(stored).model_dump()
        run = new_run(req.request_id, req.cluster, versions, versions, list(order.steps),
                      [n.hostname for n in stored.nodes], self.now().isoformat(), request=request)
        why = await self.upgrades.start_claimed(run, lambda cur: _running(cur, req.cluster))
        if why:
            return _rejected(req, why, [ErrorItem(path="Busy", message=why)])
        log.info("apply accepted: %d action(s), %d step(s)", len(answer.actions), len(run.steps),
                 extra={"cluster": req.cluster, "request_id": req.request_id})
        self.upgrades.kick(req.cluster)
        return [Out(answer, APPLY_ACCEPTED, f"apply-accepted:{req.request_id}"),
                Out(UpgradeChanged(cluster=req.cluster, at=self.now().isoformat(), upgrade=view(run)),
                    upgrade_subject(req.cluster))]


def _rejected(req: ApplyCluster, message: str, refusals: list[ErrorItem] | None = None) -> list[Out]:
    log.warning("apply refused: %s", message, extra={"cluster": req.cluster, "request_id": req.request_id})
    return [Out(ApplyRejected(request_id=req.request_id, cluster=req.cluster, message=message,
                              refusals=refusals or []), APPLY_REJECTED, f"apply-rejected:{req.request_id}")]


def _refusals(diff: ClusterDiff, order: ApplyOrder) -> list[ErrorItem]:
    """Every reason the diff cannot be carried out: its own refusals, versions alone (an
    upgrade's), and what the run's order cannot do."""
    refusals = [ErrorItem(path=r.name, message=r.message) for r in diff.refusals]
    if diff.upgrade_only:
        versions = ", ".join(f"{k} {a} -> {b}" for k, (a, b) in diff.versions.items())
        refusals.append(ErrorItem(path="VersionsOnly", message=f"only versions change ({versions}): use `bke upgrade apply`"))
    return refusals + [ErrorItem(path=r.name, message=r.message) for r in order.refusals]
