"""The install on the one loop (bke.adapters.operation): its carriers, its events, and what the
rest of the dispatcher asks of it (a refusal, the phases' totals, commands re-asked after a
restored backup). Decisions are `decide`'s; the record and its store are `record` and `store`.

    skip        a phase that does not apply to the plan: Skipped
    start       a phase starts: Running, and the install's current phase
    send        the next batch of a phase's commands (commands.py)
    resend      the commands a retry put back in flight, under their new generation
    local       the phase's own work in the dispatcher (local_work.py): done, wait or failed
    phase-done  every target succeeded: the phase Succeeded
    explain     some targets failed: the Fail that names them (ten at most) and the first one's step

Where it differs from the other operations, and why:
- its answers are counted into its phases as they arrive, one script each (results.py), not
  kept beside the record and folded by the pass: at 10,000 nodes a fold per pass would cost more
  than the answers (`folded` says nothing changed);
- it announces each phase's change as it happens (`install.phase`), and its end as `install
  finished` (the end event); there is no `install.changed`;
- a plan or file set its writer did not sign fails it as invalid input (`failure`): no pass can
  make the signature good.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime

from bke.adapters.operation import EndEvent, OperationLoop
from bke.adapters.state import PlanCache
from bke.contracts.base import Message
from bke.contracts.install import InstallFinished, PhaseChanged, install_subject
from bke.contracts.statuses import CommandStatus, OperationStatus, PhaseNeed, PhaseStatus
from bke.core.operation import Act, Decision, Fail, Succeed, Wait
from bke.core.plan import Plan
from bke.core.secrets.record_signing import RecordKeyError, RecordSignatureError

from ... import decide as phase_decision
from ... import readiness
from ...phases import PHASES, Phase
from ...ports import LocalWork
from ...state import DispatcherState
from .commands import InstallCommands
from .decide import EXPLAIN, LOCAL, PHASE_DONE, RESEND, SKIP, START, decide, progress
from .record import InstallRecord, PhaseView
from .store import InstallStore

__all__ = ["Installs"]

log = logging.getLogger("bke.dispatcher")
KIND = "install"  # its lease, and its name in the cluster's operation slot


class Installs(OperationLoop[InstallRecord]):
    def __init__(self, store: InstallStore, plans: PlanCache, commands: InstallCommands, local: LocalWork,
                 now: Callable[[], datetime], owner: str, lease_ms: int = 15000,
                 kick: Callable[[str], None] | None = None):
        carriers = {"send": self._send, RESEND: self._resend, SKIP: self._skip, START: self._start,
                    LOCAL: self._local, PHASE_DONE: self._phase_done, EXPLAIN: self._explain}
        super().__init__(store, commands.publish, now, owner, lease_ms, kick, sign=None, kind=KIND,
                         carriers=carriers, log=log, decide=decide)
        self.state: DispatcherState = store.state
        self.plans, self.commands, self.local = plans, commands, local
        self._targets: dict[tuple[int, str], list] = {}  # (id of the cached plan, phase) -> nodes

    # the loop's hooks --------------------------------------------------------------------
    async def folded(self, rec: InstallRecord) -> bool:
        return False  # counted into the phases as they arrived (results.py)

    async def decider(self, rec: InstallRecord) -> Callable[[InstallRecord], Decision]:
        await self._look(rec)
        return decide

    def waited(self, rec: InstallRecord, wait: Wait) -> bool:
        """`bke status` shows why a phase is not moving (e.g. "3/4 agents registered")."""
        current, view = rec.current(PHASES), rec.view
        if current is None or view is None:
            return False
        noted = {"message": wait.reason}
        done = progress(view)
        if done is not None:
            noted["ok"] = str(done)
        pr = rec.phase(current.slug)
        if pr.message == wait.reason and (done is None or pr.ok == done):
            return False
        rec.noted = noted
        return True

    def failure(self, rec: InstallRecord, exc: Exception) -> Fail:
        if isinstance(exc, (RecordSignatureError, RecordKeyError)):
            # no command is built from a record its writer did not sign: the install fails
            # naming it (retrying cannot make the signature good)
            log.warning("install refused: %s", exc, extra={"cluster": rec.cluster})
            rec.kind = "invalid"
            end = Fail(str(exc))
            self._failed_at(rec, end)  # the loop calls no `ending` on an error's Fail
            return end
        raise exc

    async def ending(self, rec: InstallRecord, end: Succeed | Fail) -> None:
        if isinstance(end, Succeed):
            rec.failed_phase, rec.failed_node, rec.kind = "", "", ""
        else:
            self._failed_at(rec, end)

    def _failed_at(self, rec: InstallRecord, end: Fail) -> None:
        """Where and how the install failed: its first unfinished phase, the node named, the kind."""
        current = rec.current(PHASES)
        rec.failed_phase, rec.failed_node = (current.slug if current is not None else ""), end.node
        if not rec.kind:  # not said by a carrier: a service's failure decides first (the inputs do not
            # change during a pass), so with one recorded it is that one
            failed = readiness.failed_input(rec.inputs, rec.plan_digest)
            rec.kind = failed[1].kind if failed is not None else "operational"

    def changed(self, rec: InstallRecord, at: str) -> tuple[Message, str]:
        """The failed phase's event, once the install ended on it (the others go out as they change)."""
        pr = rec.phase(rec.failed_phase)
        ev = PhaseChanged(request_id=rec.request_id, cluster=rec.cluster, phase=rec.failed_phase,
                          status=PhaseStatus.FAILED, at=rec.finished_at or at, message=rec.message, done=pr.ok,
                          total=pr.total)
        return ev, install_subject(rec.cluster, "phase")

    async def announce(self, rec: InstallRecord) -> None:
        if not rec.running and rec.failed_phase and not rec.announced:
            await super().announce(rec)

    def end_event(self, rec: InstallRecord) -> EndEvent | None:
        if rec.running or rec.announced:
            return None
        ok = rec.status == OperationStatus.SUCCEEDED
        ev = InstallFinished(request_id=rec.request_id, cluster=rec.cluster, status=rec.status, at=rec.finished_at,
                             phase=rec.failed_phase or None, node=rec.failed_node or None, message=rec.message,
                             kind=rec.kind or None, nodes_changed=ok or rec.nodes_changed, plan_digest=rec.plan_digest)
        # `at` in the id: a retried install may end the same way twice within the duplicate window
        return EndEvent(ev, install_subject(rec.cluster, "finished"),
                        f"finished:{rec.cluster}:{rec.request_id}:{rec.status}:{rec.finished_at}")

    def end_sent(self, rec: InstallRecord) -> None:
        rec.announced = True

    # what the pass reads ----------------------------------------------------------------
    def targets(self, plan: Plan, phase: Phase) -> list:
        """Memoised per plan object: the plan cache hands out the same object until it changes."""
        key = (id(plan), phase.slug)
        found = self._targets.get(key)
        if found is None:
            if len(self._targets) > 256:
                self._targets.clear()
            found = self._targets[key] = phase.targets(plan)
        return found

    async def _look(self, rec: InstallRecord) -> None:
        """Read what the current phase depends on into the record's view (again as a phase ends)."""
        phase = rec.current(PHASES)
        if phase is None:
            rec.view = None
            return
        plan = await self.plans.load(rec.cluster)
        targets = self.targets(plan, phase)
        agents = sealed = 0
        if PhaseNeed.AGENTS in phase.needs:
            agents = await self.state.agent_count(rec.cluster, [n.hostname for n in targets])
        if PhaseNeed.CERTS in phase.needs:
            sealed = await self.state.sealed_count(rec.cluster, [n.hostname for n in plan.nodes])
        seen = phase_decision.Observed(agents=agents, inputs=rec.inputs, sealed=sealed, nodes=len(plan.nodes),
                                       plan_digest=rec.plan_digest)
        rec.view = PhaseView(phase, plan, phase.run_if(plan), targets, seen)

    # the carriers ------------------------------------------------------------------------
    def _phase_of(self, rec: InstallRecord) -> tuple[Phase, PhaseView]:
        view = rec.view
        assert view is not None, "a phase carried out without its view"
        return view.phase, view

    async def _skip(self, rec: InstallRecord, d: Act) -> Decision | None:
        phase, _ = self._phase_of(rec)
        await self._set_phase(rec, phase.slug, PhaseStatus.SKIPPED, finishedAt=self._ts())
        await self._look(rec)
        return None

    async def _start(self, rec: InstallRecord, d: Act) -> Decision | None:
        phase, _ = self._phase_of(rec)
        await self.state.set_install(rec.cluster, phase=phase.slug)
        await self._set_phase(rec, phase.slug, PhaseStatus.RUNNING, startedAt=self._ts())
        return None

    async def _send(self, rec: InstallRecord, d: Act) -> Decision | None:
        phase, view = self._phase_of(rec)
        pr = rec.phase(phase.slug)
        batch = view.targets[pr.cursor : pr.cursor + len(d.nodes)]
        await self.commands.send(rec.request_id, rec.cluster, view.plan, phase, batch, {}, pr.cursor)
        rec.phases[phase.slug] = replace(pr, cursor=pr.cursor + len(batch))
        rec.nodes_changed = True
        return None

    async def _resend(self, rec: InstallRecord, d: Act) -> Decision | None:
        phase, view = self._phase_of(rec)
        cmds = await self.state.all_commands(rec.cluster, phase.slug)
        retry = {h: c["gen"] for h, c in cmds.items() if c["status"] == CommandStatus.RETRY}
        nodes = [n for n in view.targets if n.hostname in retry]
        await self.commands.send(rec.request_id, rec.cluster, view.plan, phase, nodes, retry, None)
        await self.state.set_phase(rec.cluster, phase.slug, retry="")
        rec.phases[phase.slug] = replace(rec.phase(phase.slug), retry=False)
        rec.nodes_changed = rec.nodes_changed or bool(nodes)
        return None

    async def _local(self, rec: InstallRecord, d: Act) -> Decision | None:
        phase, view = self._phase_of(rec)
        assert phase.local is not None
        outcome = await self.local.run(phase.local, view.plan)
        if outcome.status == "wait":
            return Wait(outcome.reason, outcome.delay)
        if outcome.status == "failed":
            rec.kind = outcome.kind
            return Fail(outcome.reason, (outcome.node,) if outcome.node else ())
        return await self._phase_done(rec, d)

    async def _phase_done(self, rec: InstallRecord, d: Act) -> Decision | None:
        phase, view = self._phase_of(rec)
        done = progress(view)
        fields = {"finishedAt": self._ts(), "message": ""} | ({"ok": str(done)} if done is not None else {})
        await self._set_phase(rec, phase.slug, PhaseStatus.SUCCEEDED, **fields)
        await self._look(rec)
        return None

    async def _explain(self, rec: InstallRecord, d: Act) -> Decision | None:
        phase, _ = self._phase_of(rec)
        reason, node = phase_decision.failed_nodes_reason(await self.state.all_commands(rec.cluster, phase.slug))
        rec.kind = "operational"
        return Fail(reason, (node,))

    async def _set_phase(self, rec: InstallRecord, slug: str, status: PhaseStatus, **fields: str) -> None:
        """A phase's change, written, then announced (with its counts as they are now)."""
        await self.state.set_phase(rec.cluster, slug, status=status, **fields)
        pr = phase_decision.PhaseRecord.from_hash(await self.state.phase(rec.cluster, slug))
        rec.phases[slug] = pr
        ev = PhaseChanged(request_id=rec.request_id, cluster=rec.cluster, phase=slug, status=status, at=self._ts(),
                          message=fields.get("message", ""), done=pr.ok, total=pr.total)
        log.info("phase %s %s", slug, status, extra={"cluster": rec.cluster, "phase": slug, "request_id": rec.request_id})
        await self.publish(ev.to_bytes(), install_subject(rec.cluster, "phase"), {})

    # what the rest of the dispatcher asks ---------------------------------------------------
    async def refuse(self, cluster: str, rid: str, why: str) -> None:
        """End a Running install that may not run (another operation holds the cluster's slot),
        with the reason, as any failed install: `install finished` Failed, nothing changed."""
        rec = await self.store.load(cluster)
        if rec is None or not rec.running or rec.request_id != rid:
            return
        rec.kind = "operational"
        end = Fail(why)
        await self.ending(rec, end)
        rec.finish(OperationStatus.FAILED, why, self._ts())
        if await self.store.save(rec):
            await self.announce(rec)
            await self._ended(rec)

    async def set_total(self, cluster: str, plan: Plan) -> None:
        for phase in PHASES:
            await self.state.set_phase(cluster, phase.slug, total=len(phase.targets(plan)))

    async def reask_in_flight(self, cluster: str) -> list[str]:
        """After the state was restored from a backup (bke.adapters.state.epoch): send the running install's
        commands that the restored record still has in flight again, under a new message id, and
        name their nodes. Why: a result counted after the backup was taken and before the loss
        was acknowledged then, and is gone; the same command sent again under its own id falls in
        JetStream's duplicate window and is dropped, so the phase would wait for ever. An agent
        that ran the command answers it from its journal: nothing runs twice."""
        rec = await self.store.load(cluster)
        phase = rec.current(PHASES) if rec is not None and rec.running else None
        if rec is None or phase is None:
            return []
        plan = await self.plans.load(cluster)
        cmds = await self.state.all_commands(cluster, phase.slug)
        gens = {h: int(c.get("gen", 0)) for h, c in cmds.items() if c.get("status") == CommandStatus.SENT}
        nodes = [n for n in self.targets(plan, phase) if n.hostname in gens]
        if nodes:
            await self.commands.send(rec.request_id, cluster, plan, phase, nodes, gens, None, again=f"@restored:{self._ts()}")
        return [n.hostname for n in nodes]
