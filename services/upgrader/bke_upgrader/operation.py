"""The upgrade, the adapters: requests in, node commands out, results folded, one pass at a time.

Decisions are bke.upgrade's (requests: `decide_request`; the run: `bke.upgrade.run.decide`);
this module reads, writes and publishes around them:

- `on_request`: gathers the live facts, decides, answers `upgrade.accepted` / `.rejected`, and
  stores the run (one operation per cluster: refused while an upgrade or a rotation runs);
- `on_result`: records an agent's answer to an upgrade command beside the run;
- `reconcile`: under the cluster's "upgrade" lease, folds the answers in and carries out the
  next decision (a local step, a drain, a batch of commands, an uncordon, the end).

Errors (bke.errors): a malformed request is answered `upgrade.rejected` naming its field; an
outage or a dispatcher that does not answer yet is retried (TemporaryError); the run's record
moves forward only, so any process may die at any point and the next pass goes on.
"""
from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, Protocol

from bke.bus.handler import Out
from bke.bus.delivery import delivery_subject
from bke.contracts.agent import AGENT_VERSION, AgentCommand, CommandResult, agent_subject, subject_node
from bke.contracts.render import RENDER_MANIFESTS, RenderManifests
from bke.contracts.status import StatusError
from bke.contracts.upgrade import (
    UPGRADE_ACCEPTED,
    UPGRADE_REJECTED,
    UpgradeChanged,
    UpgradeCluster,
    UpgradeNode,
    UpgradeRejected,
    UpgradeStepView,
    UpgradeVersions,
    UpgradeView,
    upgrade_subject,
)
from bke.errors import MalformedMessage, TemporaryError
from bke.etcdsnap.step import snapshot_step
from bke.plan import Plan
from bke.state import PlanCache, RedisPlanStore, plan_digest
from bke.state.keys import accepted_agents_key
from bke.state.lease import claim_lease, release_lease
from bke.state.migrate import ensure_current
from bke.state.schema import StoredVersionError
from bke.upgrade.node_commands import node_upgrade_steps
from bke.upgrade.paths import resolve_target
from bke.upgrade.run import (
    Decision,
    UpgradeRun,
    awaited_ids,
    decide,
    finish,
    fold_results,
    is_upgrade_command,
    mark_drained,
    mark_local,
    mark_sent,
    mark_uncordoned,
    new_run,
    upgrade_command_id,
)
from bke.upgrade.target_plan import target_plan

from .drain import Drainer
from .facts import LiveFacts
from .renders import Renders
from .requests import decide_request, parse_request
from .store import UpgradeStore

__all__ = ["Outcome", "Upgrades"]

log = logging.getLogger("bke.upgrader")
Publish = Callable[[bytes, str, dict[str, str]], Awaitable[None]]
Sign = Callable[[AgentCommand], Awaitable[AgentCommand]]
LEASE = "upgrade"
WAIT_S = 5.0  # re-check a batch in flight this often even without a result
COMMAND_TTL_S = 3600.0
# Steps whose commands carry files of the old and new render (bke.upgrade.node_commands), and the
# addons step (the new render's manifests); the others (agents, snapshots, post-checks) need none.
RENDERED_STEPS = frozenset({"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler",
                            "masters-runtime", "workers", "addons"})


class Checksums(Protocol):
    async def for_plan(self, plan: Plan) -> dict[str, str]: ...


class Addons(Protocol):
    async def apply(self, old: Plan, new: Plan, rendered: dict[str, str]) -> str:
        """"" when every addon of the new plan is applied (and ready), else why not."""


class SnapshotSetup(Protocol):
    async def recipient(self) -> str:
        """The public half of the deployment's snapshot key (base64), once the store exists."""


class Outcome:
    def __init__(self, status: str, delay: float = 0.0, reason: str = ""):
        self.status, self.delay, self.reason = status, delay, reason


class Upgrades:
    def __init__(self, store: UpgradeStore, plans: PlanCache, plan_store: RedisPlanStore, facts: LiveFacts,
                 renders: Renders, checksums: Checksums, drainer: Drainer, addons: Addons, publish: Publish,
                 now: Callable[[], datetime], owner: str, lease_ms: int, *, sign: Sign,
                 snapshots: SnapshotSetup, answer_deadline_s: float = 1800.0,
                 component_timeout_s: float = 180.0):
        self.snapshots = snapshots
        self.component_timeout_s = component_timeout_s
        self.store, self.plans, self.plan_store, self.facts = store, plans, plan_store, facts
        self.renders, self.checksums, self.drainer, self.addons = renders, checksums, drainer, addons
        self.publish, self.now, self.owner, self.lease_ms, self.sign = publish, now, owner, lease_ms, sign
        self.answer_deadline_s = answer_deadline_s
        self.kick: Callable[[str], None] = lambda cluster: None
        self._targets: dict[str, tuple[str, Plan, Plan]] = {}  # cluster -> (request, stored plan, target plan)

    def _ts(self) -> str:
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
        if status.rotation is not None and status.rotation.status == "Running":
            return rejected(f"a certificate rotation of {req.cluster} is running ({status.rotation.done}/"
                            f"{status.rotation.total} nodes): one operation per cluster")
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
        run = new_run(req.request_id, req.cluster, answer.current.model_dump(), answer.target.model_dump(),
                      list(decided.order), [n.hostname for n in plan.nodes], self._ts(),
                      request=req.model_dump(mode="json", by_alias=True), left_out=list(answer.left_out),
                      agent_version=AGENT_VERSION)
        run.request["planDigest"] = await self._plan_digest(req.cluster)

        def refuse(cur: UpgradeRun | None) -> str:
            if cur is not None and cur.status == "Running":
                return f"upgrade {cur.request_id} of {req.cluster} is still running (step {cur.step_now().name if cur.step_now() else '-'})"
            return ""

        why = await self.store.start(run, refuse)
        if why:
            return rejected(why)
        log.info("upgrade accepted: %s -> %s", answer.current.kubernetes, answer.target.kubernetes, extra=ids)
        self.kick(req.cluster)
        return [Out(answer, UPGRADE_ACCEPTED, f"upgrade-accepted:{req.request_id}"),
                Out(UpgradeChanged(cluster=req.cluster, at=self._ts(), upgrade=view(run)), upgrade_subject(req.cluster))]

    async def _plan_digest(self, cluster: str) -> str:
        meta = await self.plan_store.meta(cluster)
        return meta.digest if meta else ""

    # results ----------------------------------------------------------------
    async def on_result(self, res: CommandResult) -> None:
        if not is_upgrade_command(res.command_id):
            return  # an install's, a rotation's or a health round's: the dispatcher's
        why = await self._untrusted(res)
        if why:
            log.warning("upgrade result dropped: %s", why, extra={"cluster": res.cluster, "node": res.node,
                                                                 "command_id": res.command_id, "rate_key": "upgrade-untrusted"})
            return
        failed = next((s for s in res.steps if s.status == "Failed"), None)
        step = failed.id if failed else ""
        stderr = (failed.stderr or failed.stdout) if failed else ""
        await self.store.record_result(res, step, stderr)
        self.kick(res.cluster)

    async def _untrusted(self, res: CommandResult) -> str:
        """Why a result is not believed ("" if it is), by the dispatcher's rule (its results.py):
        it came on its node's subject, its command id names that node, and it comes from the
        node's accepted agent (learned from `certs.sealed`, never from the agent's own claim)."""
        where = subject_node(delivery_subject())
        if where is not None and where != (res.cluster, res.node):
            return f"published on the subject of {where[1]} in {where[0]}"
        if res.command_id.split("/")[2:3] != [res.node]:
            return "its command id names another node"
        accepted = await self.store.r.hget(accepted_agents_key(res.cluster), res.node)
        accepted = accepted.decode() if isinstance(accepted, bytes) else accepted
        if accepted is None:
            return "no agent of this node was accepted"
        if accepted != res.agent_id:
            return f"agent {res.agent_id} is not the node's accepted agent"
        return ""

    # the run ----------------------------------------------------------------
    async def reconcile(self, cluster: str) -> Outcome:
        if not await claim_lease(self.store.r, cluster, LEASE, self.owner, self.lease_ms):
            return Outcome("wait", 1.0, "another upgrader holds the lease")
        try:
            return await self._reconcile(cluster)
        finally:
            await release_lease(self.store.r, cluster, LEASE, self.owner)

    async def _plans(self, run: UpgradeRun) -> tuple[Plan, Plan]:
        """The stored plan and the target plan. Placing a 5,000-node plan again takes a second
        or two, so the target is kept while the stored plan is the same object (PlanCache
        re-reads only a changed digest). After a crash between storing the target plan and
        saving the run as Succeeded, the stored plan is the target already: the target plan of
        it is the same, and the run ends."""
        old = await self.plans.load(run.cluster)
        hit = self._targets.get(run.cluster)
        if hit is not None and hit[0] == run.request_id and hit[1] is old:
            return old, hit[2]
        t = run.target
        new = target_plan(old, resolve_target(old, t["kubernetes"], t["etcd"], t["containerd"]))
        self._targets[run.cluster] = (run.request_id, old, new)
        return old, new

    async def _reconcile(self, cluster: str) -> Outcome:
        run = await self.store.load(cluster)
        if run is None or run.status != "Running":
            return Outcome("done")
        answers = await self.store.results(cluster, awaited_ids(run))
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
                finish(run, False, self._ts(), d.reason)
                log.warning("upgrade failed: %s", d.reason, extra={"cluster": cluster, "request_id": run.request_id})
                break
            await self._carry_out(run, d, old, new)
            await self.store.save(run)  # each fact as soon as it is one: a later failure in this pass keeps it
            if d.action == "send":
                break  # answers come later
        if changed:
            await self.store.save(run)
            await self._changed(run)
        if run.status == "Failed":
            return Outcome("failed", reason=run.message)
        return Outcome("done") if run.status == "Succeeded" else Outcome("wait", WAIT_S)

    async def _carry_out(self, run: UpgradeRun, d: Decision, old: Plan, new: Plan) -> None:
        step = d.step
        assert step is not None
        if d.action == "local":
            if step.name == "pre-checks":
                # the checks ran when the request was accepted; what is left is the seed's
                # "stored-data conversion": every record of the cluster in its current form
                # before anything moves (bke.state.migrate; idempotent, safe with two processes)
                try:
                    report = await ensure_current(self.store.r, run.cluster)
                except StoredVersionError as exc:
                    mark_local(step, False, str(exc))
                else:
                    if report.converted:
                        log.info("stored data converted: %s", ", ".join(r.kind for r in report.converted),
                                 extra={"cluster": run.cluster, "request_id": run.request_id})
                    mark_local(step, True)
            elif step.name == "addons":
                renders = await self.renders.get(run.request_id, old, new)
                why = await self.addons.apply(old, new, renders.new_addons)
                mark_local(step, not why, why)
            return
        hosts = list(d.hosts)
        if d.action == "drain":
            timeout = float(run.request.get("drainTimeoutS", 300.0))
            why = await self.drainer.cordon_and_drain(new, hosts, timeout)
            if why:
                mark_local(step, False, why)
            else:
                mark_drained(step)
            return
        if d.action == "uncordon":
            await self.drainer.uncordon(new, hosts)
            mark_uncordoned(step)
            return
        if d.action == "send":
            await self._send(run, step.name, step.group, hosts, old, new)
            mark_sent(step, self.now().timestamp())

    async def _send(self, run: UpgradeRun, step: str, group: str, hosts: list[str], old: Plan, new: Plan) -> None:
        renders = await self.renders.get(run.request_id, old, new) if step in RENDERED_STEPS else None
        sums = await self.checksums.for_plan(new) if step in ("masters-runtime", "workers") else {}
        now = self.now()
        expires = datetime.fromtimestamp(now.timestamp() + COMMAND_TTL_S, tz=now.tzinfo).isoformat()
        recipient = await self.snapshots.recipient() if step == "etcd-snapshots" else ""
        for host in hosts:
            if step == "etcd-snapshots":  # taken from the running members: the plan the cluster runs now
                steps: list[Any] = [snapshot_step(old, group, host, recipient, now, run.request_id)]
            else:
                steps = node_upgrade_steps(step, group, old, new, host, renders.old.get(host, {}) if renders else {},
                                           renders.new.get(host, {}) if renders else {}, sums, self.component_timeout_s)
            cid = upgrade_command_id(run.cluster, run.request_id, step, group, host)
            cmd = await self.sign(AgentCommand(command_id=cid, cluster=run.cluster, node=host, phase=f"upgrade:{step}",
                                               issued_at=now.isoformat(), expires_at=expires, steps=steps, issuer="upgrader"))
            # published before the record says sent: a crash in between publishes the same id
            # again, which JetStream drops and an agent that completed it only replays
            await self.publish(cmd.to_bytes(), agent_subject(run.cluster, host, "command"), {"Nats-Msg-Id": cid})
        log.info("upgrade step %s%s: %d node(s) sent", step, f"/{group}" if group else "", len(hosts),
                 extra={"cluster": run.cluster, "request_id": run.request_id})

    async def _succeed(self, run: UpgradeRun, old: Plan, new: Plan) -> None:
        pj = new.to_json()
        stored = await self.plan_store.upgrade(new, pj, plan_digest(pj), str(run.request.get("planDigest", "")),
                                               run.request_id, self._ts())
        if not stored and (await self.plans.load(run.cluster)).kubernetes_version != new.kubernetes_version:
            raise TemporaryError("the stored plan changed during the upgrade; not replaced", delay=5.0)
        # the renderer stores the new plan's files (what a later `bke retry` or node replacement sends)
        ask = RenderManifests(request_id=f"upgrade-{run.request_id}", cluster=run.cluster)
        await self.publish(ask.to_bytes(), RENDER_MANIFESTS, {"Nats-Msg-Id": f"render:upgrade:{run.request_id}"})
        finish(run, True, self._ts())
        log.info("upgrade succeeded", extra={"cluster": run.cluster, "request_id": run.request_id})

    async def _changed(self, run: UpgradeRun) -> None:
        ev = UpgradeChanged(cluster=run.cluster, at=self._ts(), upgrade=view(run))
        await self.publish(ev.to_bytes(), upgrade_subject(run.cluster), {})

    async def resume_all(self) -> list[str]:
        resumed = []
        for cluster in await self.store.clusters():
            run = await self.store.load(cluster)
            if run is not None and run.status == "Running":
                self.kick(cluster)
                resumed.append(cluster)
        return resumed

    async def view_of(self, cluster: str) -> UpgradeView | None:
        run = await self.store.load(cluster)
        return None if run is None else view(run)


def view(run: UpgradeRun) -> UpgradeView:
    now = run.step_now()
    return UpgradeView(
        request_id=run.request_id, status=run.status, current=UpgradeVersions(**run.current),
        target=UpgradeVersions(**run.target),
        steps=[UpgradeStepView(name=s.name, group=s.group, status=s.status, done=s.done, total=s.total,
                               batches=len(s.batches)) for s in run.steps],
        step=now.name if now else "", started_at=run.started_at, finished_at=run.finished_at, message=run.message,
        failed=[UpgradeNode(hostname=f.hostname, status=f.status, step=f.step, failed_step=f.failed_step,
                            stderr=f.stderr[:500]) for f in run.failed],
        left_out=run.left_out,
    )

