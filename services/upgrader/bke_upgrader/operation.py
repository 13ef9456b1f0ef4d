"""The upgrade, the adapters: requests in, node commands out, results folded, one pass at a time.

Decisions are bke.core.upgrade's (requests: `decide_request`; the run: `bke.core.upgrade.run.decide`);
this module reads, writes and publishes around them:

- `on_request`: gathers the live facts, decides, answers `upgrade.accepted` / `.rejected`, and
  stores the run after claiming the cluster's operation slot (bke.adapters.state.operation_slot: one
  operation per cluster, refused naming the install, restore, rotation, reset... that runs);
- `on_result`: records an agent's answer to an upgrade command beside the run;
- `reconcile`: under the cluster's "upgrade" lease, folds the answers in and carries out the
  next decision (a local step, a drain, a batch of commands, an uncordon, the end); a pass
  that finds the run ended releases the slot.

Errors (bke.core.errors): a malformed request is answered `upgrade.rejected` naming its field; an
outage or a dispatcher that does not answer yet is retried (TemporaryError); the run's record
moves forward only, so any process may die at any point and the next pass goes on. Any other
error while a pass carries out a decision (a PermanentError, a bug) would only repeat: the run
ends Failed naming its step and node (bke.core.upgrade.failure), the view is published and the
pass returns, which releases the lease.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, Protocol

from bke.adapters.bus.handler import Out
from bke.contracts.agent import (
    AGENT_VERSION,
    AgentCommand,
    CommandResult,
    NewFile,
    agent_subject,
)
from bke.contracts.render import RENDER_MANIFESTS, RenderManifests
from bke.contracts.status import StatusError
from bke.contracts.upgrade import (
    UPGRADE_ACCEPTED,
    UPGRADE_REJECTED,
    UpgradeChanged,
    UpgradeCluster,
    UpgradeRejected,
    UpgradeView,
    upgrade_subject,
)
from bke.core.errors import MalformedMessage, PermanentError, TemporaryError, is_unavailable
from bke.core.etcdsnap.step import snapshot_step
from bke.core.lifecycle.apply_run import JOIN_STEP, MEMBER_NODE_STEPS, REMOVE_STEP, member_commands
from bke.core.plan import Plan, plan_spec_text
from bke.core.secrets.binding import result_refusal
from bke.adapters.state import PlanCache, RedisPlanStore, plan_digest
from bke.adapters.state.command_signing import Prefetch
from bke.adapters.state.lease import claim_lease, release_lease
from bke.adapters.state.operation_slot import operation_holder, release_operation, start_in_slot
from bke.adapters.state.operation_slot import refusal as slot_refusal
from bke.adapters.state.keys import accepted_agents_key, plan_meta_key, upgrade_results_key
from bke.adapters.state.plans import INCARNATION_READ, incarnation_of
from bke.adapters.state.migrate import needs_conversion
from bke.core.state.schema import StoredVersionError, record_kind
from bke.core.upgrade.certificates import rbac_before_renewal
from bke.core.upgrade.failure import abort_run, error_text
from bke.core.upgrade.node_commands import CLEANUP_STEP, LB_STEP, BinariesMemo, node_upgrade_steps, stops_registering
from bke.core.upgrade.node_versions import settled, stopped_batch_ids
from bke.core.upgrade.paths import resolve_target
from bke.core.upgrade.run import (
    DRAIN_STEP,
    UNREGISTER_STEP,
    Decision,
    UpgradeRun,
    awaited_ids,
    decide,
    finish,
    fold_results,
    is_upgrade_command,
    mark_drained,
    mark_local,
    mark_local_batch,
    mark_sent,
    mark_uncordoned,
    new_run,
    upgrade_command_id,
)
from bke.core.upgrade.run_request import ApplyRequest, UpgradeRequest
from bke.core.upgrade.target_plan import target_plan

from .agent_keys import sealer_for
from .agent_release import ReleaseError, ReleaseSource
from .certs import UpgradeCerts
from .membership import ApplyMembership
from .drain import Drainer
from .facts import LiveFacts
from .renders import Renders
from .requests import decide_request, parse_request, versions_of
from .views import view
from .store import UpgradeStore

__all__ = ["AtNode", "Outcome", "Upgrades"]

log = logging.getLogger("bke.upgrader")
Publish = Callable[[bytes, str, dict[str, str]], Awaitable[None]]
# a command -> its signed body (bke.adapters.state.command_signing.CommandSigning.sign_bytes): the body,
# not the signed model, so that its canonical bytes are written once per command
Sign = Callable[[AgentCommand], Awaitable[bytes]]
LEASE = "upgrade"
# the records an upgrade reads and writes, checked (never converted) by its pre-checks step
RECORDS_RELIED_ON = tuple(record_kind(k) for k in ("plan", "upgrade", "etcd-restore"))
WAIT_S = 5.0  # re-check a batch in flight this often even without a result
# Answers recorded by another replica (or before a restart) are read from Redis this often
# while a batch waits; this process's own are known at once (UpgradeStore.results).
RESULTS_READ_EVERY_S = 1.0
COMMAND_TTL_S = 3600.0
SEND_YIELD_EVERY = 32  # commands built between two turns of the event loop (see _send)
PREFETCH_CHUNK = 500  # commands whose bindings are read in one round trip (see _send)
# The field of the run's answers hash that keeps the plan a changed spec's run started from,
# once the run swapped in its own plan (a join needs the stored plan to name the new nodes).
BASE_PLAN_FIELD = "apply:base-plan"
# Steps whose commands carry files of the old and new render (bke.core.upgrade.node_commands), and the
# addons step (the new render's manifests); the others (agents, snapshots, post-checks) need none.
RENDERED_STEPS = frozenset({"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", LB_STEP,
                            "masters-runtime", "workers", CLEANUP_STEP, "addons"})


class Checksums(Protocol):
    async def for_plan(self, plan: Plan) -> dict[str, str]: ...


class Addons(Protocol):
    async def apply(self, old: Plan, new: Plan, rendered: dict[str, str], only: str | None = None) -> str:
        """"" when every addon of the new plan (or the one named `only`) is applied (and ready),
        else why not."""


class Labels(Protocol):
    async def apply(self, plan: Plan) -> str:
        """"" when every registered node carries the plan's labels and taints, else why not."""


class SnapshotSetup(Protocol):
    async def recipient(self) -> str:
        """The public half of the deployment's snapshot key (base64), once the store exists."""


def _transient(exc: BaseException) -> bool:
    """An outage or a "later": the pass is tried again; anything else ends the run."""
    return isinstance(exc, TemporaryError) or is_unavailable(exc)


class AtNode(Exception):
    """A permanent error while serving one node of a batch: carries the node for the reason."""

    def __init__(self, node: str, cause: BaseException):
        super().__init__(f"{node}: {cause}")
        self.node, self.cause = node, cause


class Outcome:
    def __init__(self, status: str, delay: float = 0.0, reason: str = ""):
        self.status, self.delay, self.reason = status, delay, reason


def slot_kind(run: UpgradeRun) -> str:
    """The operation-slot kind of a run of the upgrade record: a changed spec's run (applies.py,
    `request.kind` "apply") holds the slot as an apply, so that a refusal names what runs."""
    return "apply" if run.is_apply else "upgrade"


class Upgrades:
    def __init__(self, store: UpgradeStore, plans: PlanCache, plan_store: RedisPlanStore, facts: LiveFacts,
                 renders: Renders, checksums: Checksums, drainer: Drainer, addons: Addons, publish: Publish,
                 now: Callable[[], datetime], owner: str, lease_ms: int, *, sign: Sign,
                 snapshots: SnapshotSetup, answer_deadline_s: float = 1800.0,
                 component_timeout_s: float = 180.0, certs: UpgradeCerts | None = None,
                 release: ReleaseSource | None = None, labels: Labels | None = None,
                 membership: ApplyMembership | None = None, prefetch: Prefetch | None = None):
        self.snapshots = snapshots
        self.prefetch = prefetch  # a batch's command bindings, read in one round trip (bke.adapters.state.command_signing)
        self.certs = certs or UpgradeCerts(store, publish)
        self.membership = membership or ApplyMembership(store, publish)
        self.release = release  # the agent release the agents step installs (None: version check only)
        self.labels = labels  # the labels step of a changed spec's run (bke.core.lifecycle.apply_run)
        self.component_timeout_s = component_timeout_s
        self.store, self.plans, self.plan_store, self.facts = store, plans, plan_store, facts
        self.renders, self.checksums, self.drainer, self.addons = renders, checksums, drainer, addons
        self.publish, self.now, self.owner, self.lease_ms, self.sign = publish, now, owner, lease_ms, sign
        self.answer_deadline_s = answer_deadline_s
        self.kick: Callable[[str], None] = lambda cluster: None
        # a kick that skips the runner's coalescing window (bke.adapters.runner): the answer that
        # completes the batch in flight has nothing left to coalesce with
        self.kick_at_once: Callable[[str], None] = lambda cluster: None
        # cluster -> the commands of the batch in flight without an answer known here, as the
        # last pass left it: a hint for the result path (the answers of another replica are
        # not in it, and then the ordinary kicks and timers drive the passes as before)
        self._unanswered: dict[str, set[str]] = {}
        # cluster -> (request, stored plan, old plan, target plan)
        self._targets: dict[str, tuple[str, Plan, Plan, Plan]] = {}

    def ts(self) -> str:
        return self.now().isoformat()

    # requests ---------------------------------------------------------------
    def refuse_bytes(self, body: bytes) -> list[Out]:
        """The answer to bytes that are no UpgradeCluster (`typed`'s `refuse`): a rejection
        naming each wrong field, never a dead letter (the CLI waits for an answer)."""
        req = parse_request(body)
        if not isinstance(req, UpgradeRejected):
            # valid as is but not in the form its header named: that is typed's dead letter
            raise MalformedMessage("an UpgradeCluster that does not read in the form its bke-schema header names")
        log.warning("upgrade request refused: %s", req.message, extra={"request_id": req.request_id})
        return [Out(req, UPGRADE_REJECTED, f"upgrade-rejected:{req.request_id}" if req.request_id else None)]

    async def on_request(self, req: UpgradeCluster) -> list[Out]:
        ids = {"cluster": req.cluster, "request_id": req.request_id}

        def rejected(message: str) -> list[Out]:
            log.warning("upgrade refused: %s", message, extra=ids)
            return [Out(UpgradeRejected(request_id=req.request_id, cluster=req.cluster, message=message),
                        UPGRADE_REJECTED, f"upgrade-rejected:{req.request_id}")]

        current = await self.store.load(req.cluster)
        if current is not None and current.request_id == req.request_id:
            self.kick(req.cluster)  # a redelivery: that upgrade exists already
            return []
        status = await self.facts.status(req.cluster)
        if isinstance(status, StatusError):
            return rejected(f"cluster {req.cluster!r}: {status.message}" if status.reason == "NotFound" else status.message)
        # one operation per cluster (bke.adapters.state.operation_slot): a quick answer naming the
        # operation that runs, for a dry run too; the claim below is the atomic one
        busy = await self.busy(req.cluster, "upgrade", req.request_id)
        if busy:
            return rejected(busy)
        plan = await self.plans.load(req.cluster)
        facts = await self.facts.gather(plan, status)
        decided = decide_request(req, plan, facts)
        answer = decided.answer
        if isinstance(answer, UpgradeRejected):
            log.warning("upgrade refused: %s", answer.message, extra=ids)
            return [Out(answer, UPGRADE_REJECTED, f"upgrade-rejected:{req.request_id}")]
        if req.dry_run:
            return [Out(answer, UPGRADE_ACCEPTED, f"upgrade-accepted:{req.request_id}")]
        assert decided.target is not None and decided.new_plan is not None
        agent_version = AGENT_VERSION
        if self.release is not None:
            try:
                agent_version = (await self.release.get()).version
                # every node the upgrade reaches must have wheels it installs, before anything runs
                reached = [n.hostname for n in plan.nodes if n.hostname not in answer.left_out]
                if why := (await self.release.updates(req.cluster, reached)).refusal():
                    return rejected(f"the agent release: {why}")
            except ReleaseError as exc:
                return rejected(f"the agent release: {exc}")
        run = new_run(req.request_id, req.cluster, answer.current.model_dump(), answer.target.model_dump(),
                      list(decided.order), [n.hostname for n in plan.nodes], self.ts(),
                      request=UpgradeRequest.accepted(req, await self.plan_digest(req.cluster)),
                      left_out=list(answer.left_out), agent_version=agent_version)

        def refuse(cur: UpgradeRun | None) -> str:
            if cur is not None and cur.status == "Running":
                return f"upgrade {cur.request_id} of {req.cluster} is still running (step {cur.step_now().name if cur.step_now() else '-'})"
            return ""

        why = await self.start_claimed(run, refuse)
        if why:
            return rejected(why)
        # the target plan the checks placed is the one `_plans` would place again from the same
        # stored plan and versions (target_plan reads only the versions): kept for the passes,
        # which saves the first one a placement (a second or two at 5,000 nodes)
        self._targets[req.cluster] = (req.request_id, plan, plan, decided.new_plan)
        if any(st.name in RENDERED_STEPS for st in run.steps):
            # begun now rather than by the first pass: at 5,000 nodes the render process ends
            # about when the agents step does, and the etcd step waits for it
            self.renders.start(run.request_id, plan, decided.new_plan)
        log.info("upgrade accepted: %s -> %s", answer.current.kubernetes, answer.target.kubernetes, extra=ids)
        self.kick(req.cluster)
        return [Out(answer, UPGRADE_ACCEPTED, f"upgrade-accepted:{req.request_id}"),
                Out(UpgradeChanged(cluster=req.cluster, at=self.ts(), upgrade=view(run)), upgrade_subject(req.cluster))]

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
        Running without a claim (written before the slot existed)."""
        return await start_in_slot(self.store.r, run.cluster, slot_kind(run), run.request_id, self.ts(),
                                   lambda: self.store.start(run, refuse))

    async def release_if_over(self, cluster: str) -> None:
        """Free the slot of the cluster's last upgrade if it has ended (idempotent: every end,
        and every resume, so that a crash between the end and the release heals)."""
        try:
            run = await self.store.load(cluster)
        except StoredVersionError:
            return
        if run is not None and run.status != "Running":
            await release_operation(self.store.r, cluster, slot_kind(run), run.request_id)

    async def plan_digest(self, cluster: str) -> str:
        meta = await self.plan_store.meta(cluster)
        return meta.digest if meta else ""

    # results ----------------------------------------------------------------
    async def on_result(self, res: CommandResult) -> None:
        if not is_upgrade_command(res.command_id):
            return  # an install's, a rotation's or a health round's: the dispatcher's
        why = self._misrouted(res)
        if not why:
            failed = next((s for s in res.steps if s.status == "Failed"), None)
            step = failed.id if failed else ""
            stderr = (failed.stderr or failed.stdout) if failed else ""
            # the accepted-agent check and the write in one round trip (15,000 results at 5,000 nodes)
            why = await self.store.record_if_accepted(res, step, stderr)
        if why:
            log.warning("upgrade result dropped: %s", why, extra={"cluster": res.cluster, "node": res.node,
                                                                 "command_id": res.command_id, "rate_key": "upgrade-untrusted"})
            return
        left = self._unanswered.get(res.cluster)
        if left is not None:
            left.discard(res.command_id)
            if not left:  # the batch's last answer: the pass that folds it may run now
                del self._unanswered[res.cluster]
                self.kick_at_once(res.cluster)
                return
        self.kick(res.cluster)

    def _misrouted(self, res: CommandResult) -> str:
        """Why a result is not believed ("" if it may be), by the dispatcher's rule (its
        results.py): it came on its node's subject (the wiring's guard, bke.adapters.bus.misaddressed,
        dropped it otherwise) and its command id names that node. The third condition, that it
        comes from the node's accepted agent (learned from `certs.sealed`, never from the
        agent's own claim), and the fourth, that it answers a command of the cluster's current
        incarnation (bke.core.secrets.binding), are checked where it is recorded
        (`UpgradeStore.record_if_accepted`)."""
        if res.command_id.split("/")[2:3] != [res.node]:
            return "its command id names another node"
        return ""

    async def untrusted(self, res: CommandResult) -> str:
        """The same rule for a result of the upgrader's other operation (an etcd restore), which
        records its answers itself: why it is not believed ("" if it is). A result that answers
        a command of another incarnation of its cluster is not either (counted, as
        `UpgradeStore.record_if_accepted` counts an upgrade's)."""
        why = self._misrouted(res)
        if why:
            return why
        async with self.store.r.pipeline(transaction=False) as pipe:
            pipe.hget(accepted_agents_key(res.cluster), res.node)
            if res.incarnation is not None:  # an answer to a bound command: of the cluster's current incarnation?
                pipe.hmget(plan_meta_key(res.cluster), INCARNATION_READ)
            accepted, *meta = await pipe.execute()
        accepted = accepted.decode() if isinstance(accepted, bytes) else accepted
        if accepted is None:
            return "no agent of this node was accepted"
        if accepted != res.agent_id:
            return f"agent {res.agent_id} is not the node's accepted agent"
        why = result_refusal(res.incarnation, incarnation_of(meta[0])) if meta else None
        if why:
            self.store.other_incarnation.dropped(res, why, log_it=False)  # its caller logs what it drops
        return why or ""

    # the run ----------------------------------------------------------------
    async def reconcile(self, cluster: str) -> Outcome:
        if not await claim_lease(self.store.r, cluster, LEASE, self.owner, self.lease_ms):
            return Outcome("wait", 1.0, "another upgrader holds the lease")
        try:
            out = await self._reconcile(cluster)
            if out.status != "wait":  # the upgrade has ended (or there is none): its slot goes
                await self.release_if_over(cluster)
            return out
        except BaseException:
            self.store.forget(cluster)  # the record object may hold facts that were not saved
            raise
        finally:
            await release_lease(self.store.r, cluster, LEASE, self.owner)

    async def _plans(self, run: UpgradeRun) -> tuple[Plan, Plan]:
        """The stored plan and the target plan. Placing a 5,000-node plan again takes a second
        or two, so the target is kept while the stored plan is the same object (PlanCache
        re-reads only a changed digest). After a crash between storing the target plan and
        saving the run as Succeeded, the stored plan is the target already: the target plan of
        it is the same, and the run ends. A retry (bke.core.upgrade.retry) may start from a stored
        plan that is the target already (the upgrade it completes succeeded without its nodes):
        its old side is then the stored plan at the versions those nodes run."""
        stored = await self.plans.load(run.cluster)
        hit = self._targets.get(run.cluster)
        if hit is not None and hit[0] == run.request_id and hit[1] is stored:
            return hit[2], hit[3]
        if isinstance(run.request, ApplyRequest):
            # a changed spec's run (applies.py): the target is the spec it carries, placed again
            # (placement is deterministic: the same plan, whose digest the request recorded).
            # Once a join swapped it in, the plan the run started from is the one kept aside
            new = await asyncio.to_thread(_placed, run.request.spec)
            old = await self._base_plan(run) if await self.plan_digest(run.cluster) == run.request.desired_digest \
                else stored
        elif run.retry_of:
            old = stored if _runs(stored, run.current) else _plan_at(stored, run.current)
            new = stored if _runs(stored, run.target) else _plan_at(stored, run.target)
        else:
            old, new = stored, _plan_at(stored, run.target)
        self._targets[run.cluster] = (run.request_id, stored, old, new)
        return old, new

    async def _reconcile(self, cluster: str) -> Outcome:
        try:
            run = await self.store.load(cluster)
        except StoredVersionError as exc:  # a record this code must not read: no pass can succeed
            log.error("upgrade record unreadable: %s", exc, extra={"cluster": cluster})
            return Outcome("failed", reason=str(exc))
        if run is None or run.status != "Running":
            return Outcome("done")
        hosts: list[tuple[str, ...]] = [()]  # the batch the pass is serving, for a failure's reason
        try:
            return await self._pass(run, hosts)
        except Exception as exc:
            if _transient(exc):
                raise  # the runner waits and resumes from the record
            node, cause = (exc.node, exc.cause) if isinstance(exc, AtNode) else ("", exc)
            reason = abort_run(run, error_text(cause), self.ts(), node=node, hosts=hosts[0])
            log.error("upgrade failed: %s", reason, exc_info=cause,
                      extra={"cluster": cluster, "request_id": run.request_id, "node": node or None})
            await self._save(run)
            await self._changed(run)
            return Outcome("failed", reason=reason)

    async def _pass(self, run: UpgradeRun, hosts: list[tuple[str, ...]]) -> Outcome:
        cluster = run.cluster
        answers = await self.store.results(cluster, awaited_ids(run), RESULTS_READ_EVERY_S)
        changed = fold_results(run, answers, self.now().timestamp(), self.answer_deadline_s)
        old, new = await self._plans(run)
        if any(st.name in RENDERED_STEPS and st.status != "Succeeded" for st in run.steps):
            self.renders.start(run.request_id, old, new)  # in the background, while the first steps run
        for _ in range(64):  # every decision that needs no answer is taken in this pass
            d = decide(run)
            if d.action in ("wait", "done"):
                break
            changed = True
            if d.action == "succeed":
                await self._succeed(run, old, new)
                break
            if d.action == "fail":
                finish(run, False, self.ts(), d.reason)
                log.warning("upgrade failed: %s", d.reason, extra={"cluster": cluster, "request_id": run.request_id})
                break
            hosts[0] = d.hosts
            await self._carry_out(run, d, old, new)
            if d.action == "send":
                break  # answers come later; saved below
            if d.action in ("local", "drain"):
                # a slow fact (an addon apply, a drain through the API) is kept as soon as it is
                # one; the quick ones (uncordon, send) are saved once, at the end of the pass:
                # redone after a crash, each is idempotent (bke.core.upgrade.run)
                await self.store.save(run)
        if changed:
            await self._save(run)
            await self._changed(run)
        waiting = awaited_ids(run) if run.status == "Running" else []
        unanswered = self.store.unanswered(cluster, waiting)
        if unanswered:
            self._unanswered[cluster] = unanswered
        else:
            self._unanswered.pop(cluster, None)
        if run.status == "Failed":
            return Outcome("failed", reason=run.message)
        return Outcome("done") if run.status == "Succeeded" else Outcome("wait", WAIT_S)

    async def _save(self, run: UpgradeRun) -> None:
        """The record; a finished run with its nodes' versions (bke.core.upgrade.node_versions)."""
        if run.status == "Running":
            await self.store.save(run)
            return
        if run.is_apply:
            if run.status == "Failed":
                await self._unswap(run)
            # a changed spec changes no version: the nodes' version records (`bke retry`'s
            # input for an upgrade) stay as the last upgrade left them
            await self.store.save_end(run, {})
            return
        answers = await self.store.results(run.cluster, stopped_batch_ids(run))
        previous = await self.store.node_versions(run.cluster)
        await self.store.save_end(run, settled(run, answers, previous))
        # ended: the cluster's operation slot goes before the end is announced (whoever sees
        # it may start the next operation at once); a crash in between heals at the next pass
        await release_operation(self.store.r, run.cluster, slot_kind(run), run.request_id)

    async def _carry_out(self, run: UpgradeRun, d: Decision, old: Plan, new: Plan) -> None:
        step = d.step
        assert step is not None
        if d.action == "local":
            if step.name == "pre-checks":
                # the checks ran when the request was accepted; what is left is the seed's
                # "stored-data conversion", which is the admin's (`bke state migrate`: this
                # service may write no other service's record): the records it relies on must
                # be in their current form before anything moves
                try:
                    stale = await needs_conversion(self.store.r, run.cluster, RECORDS_RELIED_ON)
                except StoredVersionError as exc:
                    mark_local(step, False, str(exc))
                else:
                    mark_local(step, not stale, "" if not stale else (
                        "stored records of an older BKE: " + ", ".join(f"{r.kind} v{r.found}" for r in stale)
                        + f"; run `bke state migrate {run.cluster}` (the admin's), then upgrade again"))
            elif step.name == "certificates" and run.is_apply:
                try:  # certificates whose names change (bke.core.lifecycle.apply_run: `_reissue`)
                    await self.certs.reissue(run, step, new, self._store_plan)
                except TemporaryError:
                    await self._changed(run)
                    raise
            elif step.name == "certificates":
                if rbac_before_renewal(old.kubernetes_version, new.kubernetes_version):
                    # the target release's bootstrap RBAC before any certificate it re-issues
                    # with fewer groups reaches an apiserver (apiserver-kubelet-client, bke.core.pki.
                    # subjects): else `kubectl logs/exec` are Forbidden until the addons step,
                    # as after `kubeadm upgrade apply v1.35.5` (kubernetes/kubeadm#3310)
                    renders = await self.renders.get(run.request_id, old, new)
                    why = await self.addons.apply(old, new, renders.new_addons, only="rbac")
                    if why:
                        mark_local(step, False, why)
                        return
                try:
                    await self.certs.renew(run, step, old)
                except TemporaryError:  # asked, waiting for the answer: followers see the steps done so far
                    await self._changed(run)
                    raise
            elif step.name == "labels":
                # the nodes both plans name: a new node is labelled by its join (the last step)
                kept = {n.hostname for n in old.nodes}
                plan = new.model_copy(update={"nodes": [n for n in new.nodes if n.hostname in kept]})
                why = await self.labels.apply(plan) if self.labels is not None else "no labels adapter in this upgrader"
                mark_local(step, not why, why)
            elif step.name == DRAIN_STEP:
                # nodes whose kubelet stops registering: drained before a join or roll touches them
                why = await self.drainer.cordon_and_drain(new, step.current(), run.drain_timeout_s)
                if why:
                    mark_local(step, False, why)
                else:
                    mark_local_batch(step)
            elif step.name == UNREGISTER_STEP:
                # their kubelets run standalone now (the runtime's roll) and the cleanup took
                # kubelet.conf away: nothing puts the Node objects back (a node with none is fine)
                await self.drainer.delete_nodes(new, step.current())
                mark_local_batch(step)
            elif step.name in (REMOVE_STEP, JOIN_STEP):
                try:
                    await self.membership.carry(run, step, old, new, self._store_plan)
                except TemporaryError:  # asked, waiting for the dispatcher: kept, and followers see it
                    await self.store.save(run)
                    await self._changed(run)
                    raise
            elif step.name == "addons":
                renders = await self.renders.get(run.request_id, old, new)
                why = await self.addons.apply(old, new, renders.new_addons)
                mark_local(step, not why, why)
            return
        hosts = list(d.hosts)
        if d.action == "drain":
            why = await self.drainer.cordon_and_drain(new, hosts, run.drain_timeout_s)
            if why:
                mark_local(step, False, why)
            else:
                mark_drained(step)
            return
        if d.action == "uncordon":
            # a node whose kubelet stopped registering stays cordoned until its Node object is
            # deleted (UNREGISTER_STEP): nothing is scheduled onto a Node no kubelet serves
            keep = [h for h in hosts if not stops_registering(old, new, h)]
            if keep:
                await self.drainer.uncordon(new, keep)
            mark_uncordoned(step)
            return
        if d.action == "send":
            certs = await self.certs.files_for(run, step.name, step.group, hosts, new)
            if isinstance(certs, str):  # nothing sent: the step fails with the reason
                mark_local(step, False, certs)
                return
            await self._send(run, step.name, step.group, hosts, old, new, certs)
            mark_sent(step, self.now().timestamp())

    async def _send(self, run: UpgradeRun, step: str, group: str, hosts: list[str], old: Plan, new: Plan,
                    certs: dict[str, list[NewFile]]) -> None:
        renders = await self.renders.get(run.request_id, old, new) if step in RENDERED_STEPS else None
        sums = await self.checksums.for_plan(new) if step in ("masters-runtime", "workers") else {}
        now = self.now()
        expires = datetime.fromtimestamp(now.timestamp() + COMMAND_TTL_S, tz=now.tzinfo).isoformat()
        recipient = await self.snapshots.recipient() if step == "etcd-snapshots" else ""
        # with a release, each node's UpdateAgent lists the wheels its Python and platform install
        updates = await self.release.updates(run.cluster, hosts) if step == "agents" and self.release else None
        binaries: BinariesMemo = {}  # one batch: the same plans and sums for every node
        for i, host in enumerate(hosts):
            if self.prefetch is not None and i % PREFETCH_CHUNK == 0:
                await self.prefetch(run.cluster, hosts[i:i + PREFETCH_CHUNK])
            try:
                update = updates.step(host) if updates is not None else None  # a ReleaseError fails this node
                if step == "etcd-snapshots":  # taken from the running members: the plan the cluster runs now
                    steps: list[Any] = [snapshot_step(old, group, host, recipient, now, run.request_id)]
                elif step in MEMBER_NODE_STEPS:  # a changed spec's etcd membership (bke.core.lifecycle.apply_run)
                    steps = member_commands(step, group, old, new, host, self.component_timeout_s)
                else:
                    # keepalived.conf (the VRRP password) is sealed to the master's agent; without
                    # the stored password there is no keepalived.conf to send (node_commands refuses
                    # a secret file with no sealer)
                    seal = None
                    if step == LB_STEP and renders is not None and new.load_balancer:
                        if not renders.vrrp:
                            raise ValueError("the cluster's VRRP password is not in the store (the renderer makes "
                                             "it at install): keepalived.conf cannot be rendered")
                        seal = await sealer_for(self.store.r, run.cluster, host)
                    steps = node_upgrade_steps(step, group, old, new, host, renders.old.get(host, {}) if renders else {},
                                               renders.new.get(host, {}) if renders else {}, sums,
                                               self.component_timeout_s, certs.get(host, ()), update,
                                               binaries_memo=binaries, seal=seal)
                cid = upgrade_command_id(run.cluster, run.request_id, step, group, host)
                body = await self.sign(AgentCommand(command_id=cid, cluster=run.cluster, node=host,
                                                    phase=f"upgrade:{step}", issued_at=now.isoformat(),
                                                    expires_at=expires, steps=steps, issuer="upgrader"))
                # published before the record says sent: a crash in between publishes the same id
                # again, which JetStream drops and an agent that completed it only replays
                await self.publish(body, agent_subject(run.cluster, host, "command"), {"Nats-Msg-Id": cid})
            except Exception as exc:
                if _transient(exc):
                    raise
                raise AtNode(host, exc) from exc
            if i % SEND_YIELD_EVERY == SEND_YIELD_EVERY - 1:
                # a publish only queues (nats-py writes from its flusher task): without a turn of
                # the loop a 5,000-node batch was built whole before its first command left, and
                # the agents and this process's result handlers waited for it
                await asyncio.sleep(0)
        log.info("upgrade step %s%s: %d node(s) sent", step, f"/{group}" if group else "", len(hosts),
                 extra={"cluster": run.cluster, "request_id": run.request_id})

    async def _succeed(self, run: UpgradeRun, old: Plan, new: Plan) -> None:
        if run.retry_of and not await self._retry_completes_plan(run, new):
            finish(run, True, self.ts())
            log.info("upgrade retry succeeded", extra={"cluster": run.cluster, "request_id": run.request_id})
            return
        pj = new.to_json()
        if run.is_apply:
            await self._swap_plan(run, new, pj)
            return
        stored = await self.plan_store.upgrade(new, pj, plan_digest(pj), run.plan_digest, run.request_id, self.ts())
        if not stored and (await self.plans.load(run.cluster)).kubernetes_version != new.kubernetes_version:
            raise TemporaryError("the stored plan changed during the upgrade; not replaced", delay=5.0)
        # the renderer stores the new plan's files (what a later `bke retry` or node replacement sends)
        ask = RenderManifests(request_id=f"upgrade-{run.request_id}", cluster=run.cluster)
        await self.publish(ask.to_bytes(), RENDER_MANIFESTS, {"Nats-Msg-Id": f"render:upgrade:{run.cluster}:{run.request_id}"})
        finish(run, True, self.ts())
        log.info("upgrade succeeded", extra={"cluster": run.cluster, "request_id": run.request_id})

    async def _base_plan(self, run: UpgradeRun) -> Plan:
        raw = await self.store.r.hget(upgrade_results_key(run.cluster), BASE_PLAN_FIELD)
        if raw is None:
            raise PermanentError("the plan this changed spec's run started from was not kept; not carried on")
        return await asyncio.to_thread(Plan.model_validate_json, raw)

    async def _store_plan(self, run: UpgradeRun, new: Plan, keep_base: bool = True) -> str:
        """A changed spec's plan in place of the one its run started from (compare-and-swap on
        that digest; already ours after a crash or an earlier join step: nothing to do); its digest.
        Before a join (`keep_base`), the plan it replaces is kept beside the run's answers (cleared
        when a run starts): the rolls after the join compare the new plan's files with those the
        nodes run, and a failure puts it back (`_unswap`)."""
        pj = new.to_json()
        digest = plan_digest(pj)
        if keep_base and await self.plan_digest(run.cluster) == run.plan_digest:
            base = await self.plans.load(run.cluster)
            await self.store.r.hsetnx(upgrade_results_key(run.cluster), BASE_PLAN_FIELD, base.to_json())
        stored = await self.plan_store.upgrade(new, pj, digest, run.plan_digest, run.request_id, self.ts())
        if not stored and await self.plan_digest(run.cluster) != digest:
            raise PermanentError("the stored plan changed while the changed spec was carried out; not replaced")
        return digest

    async def _unswap(self, run: UpgradeRun) -> None:
        """A changed spec's run that failed after a join swapped its plan in: the plan it started
        from goes back (compare-and-swap from the run's plan), so that applying the spec again
        sees the difference again and finishes it (every step is idempotent: a member already
        added is skipped, a node's phases ensure what is there). Its files are rendered again."""
        assert isinstance(run.request, ApplyRequest)
        desired = run.request.desired_digest
        raw = await self.store.r.hget(upgrade_results_key(run.cluster), BASE_PLAN_FIELD)
        if raw is None or await self.plan_digest(run.cluster) != desired:
            return  # never swapped (or already back)
        base = await asyncio.to_thread(Plan.model_validate_json, raw)
        text = raw.decode() if isinstance(raw, bytes) else raw
        if await self.plan_store.upgrade(base, text, plan_digest(text), desired, run.request_id, self.ts()):
            log.warning("apply failed after its plan was swapped in: the plan it started from is back",
                        extra={"cluster": run.cluster, "request_id": run.request_id})
            ask = RenderManifests(request_id=f"apply-undo-{run.request_id}", cluster=run.cluster)
            await self.publish(ask.to_bytes(), RENDER_MANIFESTS, {"Nats-Msg-Id": f"render:apply-undo:{run.cluster}:{run.request_id}"})

    async def _swap_plan(self, run: UpgradeRun, new: Plan, pj: str) -> None:
        """The end of a changed spec's run: its plan replaces the one the run started from
        (`_store_plan`), and the renderer stores the new plan's files."""
        await self._store_plan(run, new, keep_base=False)
        ask = RenderManifests(request_id=f"apply-{run.request_id}", cluster=run.cluster)
        await self.publish(ask.to_bytes(), RENDER_MANIFESTS, {"Nats-Msg-Id": f"render:apply:{run.cluster}:{run.request_id}"})
        finish(run, True, self.ts())
        log.info("apply succeeded", extra={"cluster": run.cluster, "request_id": run.request_id})

    async def _retry_completes_plan(self, run: UpgradeRun, new: Plan) -> bool:
        """Whether a retry's success makes the target plan the stored one: only when it is not
        already (the upgrade it completes failed) and no node is left behind after it."""
        if _runs(await self.plans.load(run.cluster), run.target):
            return False
        mine = set(run.request.nodes if isinstance(run.request, UpgradeRequest) else ())
        behind = [h for h, v in (await self.store.node_versions(run.cluster)).items() if v.behind and h not in mine]
        return not behind

    async def _changed(self, run: UpgradeRun) -> None:
        ev = UpgradeChanged(cluster=run.cluster, at=self.ts(), upgrade=view(run))
        await self.publish(ev.to_bytes(), upgrade_subject(run.cluster), {})

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

    async def view_of(self, cluster: str) -> UpgradeView | None:
        run = await self.store.load(cluster, fresh=True)
        return None if run is None else view(run)


def _runs(plan: Plan, versions: dict[str, str]) -> bool:
    return versions_of(plan).model_dump() == versions


def _placed(spec: str) -> Plan:
    outcome = plan_spec_text(spec, "spec")
    if outcome.plan is None:  # it was placed when the request was accepted: a bug or another BKE version
        raise PermanentError("the run's spec no longer places: " + "; ".join(str(e) for e in outcome.errors[:5]))
    return outcome.plan


def _plan_at(plan: Plan, versions: dict[str, str]) -> Plan:
    """The plan's own spec at `versions`, placed again (bke.core.upgrade.target_plan)."""
    return target_plan(plan, resolve_target(plan, versions["kubernetes"], versions["etcd"], versions["containerd"]))

