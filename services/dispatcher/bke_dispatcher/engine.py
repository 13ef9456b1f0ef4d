"""The install reconcile loop: phases top to bottom, each step returning done, wait or failed.

State lives in Redis (`state.DispatcherState`), so any replica, or this one restarted,
continues where the last stopped: a command is published before it is recorded as sent,
and its id is deterministic, so a crash between the two only re-publishes the same id
(JetStream drops the duplicate; an agent replays a command it completed).
"""
from __future__ import annotations

import asyncio
import logging
from datetime import datetime
from typing import Awaitable, Callable, Protocol

from bke.contracts.agent import AgentCommand, agent_subject
from bke.contracts.operation_ref import OperationKind, OperationRef
from bke.contracts.install import InstallFinished, NodeStepChanged, PhaseChanged, install_subject
from bke.contracts.statuses import OperationStatus, PhaseStatus, RunStatus
from bke.core.errors import TemporaryError
from bke.core.plan import Plan
from bke.core.secrets.record_signing import RecordKeyError, RecordSignatureError
from bke.adapters.runner import DONE, Outcome
from bke.adapters.state import PlanCache
from bke.adapters.state.nodefiles import RedisNodeFiles
from bke.adapters.state.operation_slot import release_operation

from . import decide, readiness
from .phases import PHASES, NodeInputs, Phase, agent_sealers
from bke.adapters.state.command_signing import Prefetch, SignBytes
from .state import DispatcherState

__all__ = ["Engine", "Outcome", "command_id", "parse_command_id"]

log = logging.getLogger("bke.dispatcher")
Publish = Callable[[bytes, str, dict[str, str]], Awaitable[None]]
SEND_CHUNK = 250  # commands built and published per round trip


def command_id(cluster: str, slug: str, node: str, gen: int) -> str:
    return f"{cluster}/{slug}/{node}/{gen}"


def parse_command_id(cid: str) -> tuple[str, str, str, int]:
    cluster, slug, node, gen = cid.split("/")
    return cluster, slug, node, int(gen)




class Checksums(Protocol):
    async def for_plan(self, plan: Plan) -> dict[str, str]: ...


class LocalWork(Protocol):
    async def run(self, name: str, plan: Plan) -> Outcome: ...


class Engine:
    def __init__(
        self,
        state: DispatcherState,
        plans: PlanCache,
        files: RedisNodeFiles,
        publish: Publish,
        checksums: Checksums,
        local: LocalWork,
        now: Callable[[], datetime],
        owner: str,
        lease_ms: int = 15000,
        notify: Publish | None = None,
        *,
        sign: SignBytes,
        prefetch: Prefetch | None = None,
    ):
        self.sign = sign  # every command is signed (signing.py): agents run nothing else
        self.prefetch = prefetch  # the bindings of a chunk's commands, read in one round trip (signing.py)
        self.state, self.plans, self.files, self.publish = state, plans, files, publish
        self.checksums, self.local, self.now, self.owner, self.lease_ms = checksums, local, now, owner, lease_ms
        self.notify = notify or publish  # per-node progress events: many, and advisory
        self._targets: dict[tuple[int, str], list] = {}  # (id of the cached plan, phase) -> nodes

    def targets(self, plan: Plan, phase: Phase) -> list:
        """Memoised per plan object: the plan cache hands out the same object until it changes."""
        key = (id(plan), phase.slug)
        found = self._targets.get(key)
        if found is None:
            if len(self._targets) > 256:
                self._targets.clear()
            found = self._targets[key] = phase.targets(plan)
        return found

    def _ts(self) -> str:
        return self.now().isoformat()

    async def reconcile(self, cluster: str) -> Outcome:
        try:
            return await self._reconcile(cluster)
        except (RecordSignatureError, RecordKeyError) as exc:
            # a plan or file set its writer did not sign: no command is built from it, and the
            # install fails naming the record (retrying cannot make the signature good)
            log.warning("install refused: %s", exc, extra={"cluster": cluster})
            inst = await self.state.install(cluster)
            if inst.get("status") != OperationStatus.RUNNING:
                return Outcome("failed", reason=str(exc))
            return await self._fail(inst["requestId"], cluster, inst, Outcome("failed", reason=str(exc), kind="invalid"))

    async def _reconcile(self, cluster: str) -> Outcome:
        inst = await self.state.install(cluster)
        if not inst or inst.get("status") in (OperationStatus.SUCCEEDED, OperationStatus.FAILED):
            return await self._ended(cluster, inst)
        plan = await self.plans.load(cluster)
        rid = inst["requestId"]
        inputs = await self._input_records(cluster)
        # 0. a service that failed for this plan fails the install now, whatever phase it is in
        failed_input = readiness.failed_input(inputs, inst.get("planDigest", ""))
        if failed_input is not None:
            name, rec = failed_input
            return await self._fail(rid, cluster, inst, Outcome("failed", reason=readiness.failure_reason(name, rec),
                                                                node=rec.node, kind=rec.kind))
        # 1-6. each phase in order, until one is not finished by this pass
        for phase in PHASES:
            outcome = await self._phase_pass(rid, cluster, plan, phase, inst, inputs)
            if outcome is not None:
                return outcome
        # 7. the install succeeds once: of two replicas reaching here, one flips Running and
        # announces it; the other finds it done (compare-and-set, not a read then a write)
        if await self.state.finish_install(cluster, rid, status=OperationStatus.SUCCEEDED, finishedAt=self._ts(),
                                           phase="", message="", kind=""):
            await self._finished(rid, cluster, OperationStatus.SUCCEEDED, None, None, "", None, True,
                                 inst.get("planDigest", ""))
        return DONE

    async def _ended(self, cluster: str, inst: dict[str, str]) -> Outcome:
        """No install, or one that has ended: what it came to."""
        if inst.get("requestId"):  # a finished install holds no slot (again after a crash: idempotent)
            await release_operation(self.state.r, cluster, "install", inst["requestId"])
        if inst.get("status") == OperationStatus.FAILED:
            return Outcome("failed", reason=inst.get("message", ""))
        return DONE

    async def _phase_pass(self, rid: str, cluster: str, plan: Plan, phase: Phase, inst: dict[str, str],
                          inputs: dict[str, readiness.InputRecord]) -> Outcome | None:
        """One phase's part of a pass: None when the phase is finished (on to the next), else
        what the pass comes to (wait, or failed)."""
        rec = decide.PhaseRecord.from_hash(await self.state.phase(cluster, phase.slug))
        # 1. finished phases are skipped over: nothing runs twice
        if rec.status.finished:
            return None
        # 2. a failed phase stops the install until `bke retry`
        if rec.status is decide.PhaseStatus.FAILED:
            return Outcome("failed", reason=rec.message)
        # 3. claim the phase: a second replica (or a restarted one) never runs it twice
        if not await self.state.claim(cluster, phase.slug, self.owner, self.lease_ms):
            return Outcome("wait", delay=1.0, reason="another dispatcher holds the phase lease")
        try:
            # 4. read the phase again under the lease: another replica may have finished it
            # between the read above and the claim (it would be decided and announced twice)
            rec = decide.PhaseRecord.from_hash(await self.state.phase(cluster, phase.slug))
            if rec.status.finished:
                return None
            if rec.status is decide.PhaseStatus.FAILED:
                return Outcome("failed", reason=rec.message)
            # 5. a phase that does not apply to this plan is recorded as Skipped (once: leased)
            if not phase.run_if(plan):
                await self._phase(rid, cluster, phase.slug, PhaseStatus.SKIPPED, finishedAt=self._ts())
                return None
            if rec.status is decide.PhaseStatus.PENDING:
                await self.state.set_install(cluster, phase=phase.slug)
                await self._phase(rid, cluster, phase.slug, PhaseStatus.RUNNING, startedAt=self._ts())
            outcome = await self._step(rid, cluster, plan, phase, inst, inputs)
        finally:
            await self.state.release(cluster, phase.slug, self.owner)
        # 6. the step's answer decides: next phase, come back later, or stop
        if outcome.status == "wait":
            # `bke status` shows why a phase is not moving (e.g. "3/4 agents registered")
            await self.state.set_phase(cluster, phase.slug, message=outcome.reason)
            return outcome
        if outcome.status == "failed":
            return await self._fail(rid, cluster, inst, outcome, phase.slug)
        await self._phase(rid, cluster, phase.slug, PhaseStatus.SUCCEEDED, finishedAt=self._ts(), message="")
        return None

    async def _fail(self, rid: str, cluster: str, inst: dict[str, str], outcome: Outcome, slug: str | None = None) -> Outcome:
        """Fail the given phase (by default the first unfinished one) and the install, and say so."""
        if slug is None:
            current = await self._unfinished_phase(cluster)
            slug = current.slug if current is not None else None
        if not await self.state.finish_install(cluster, rid, status=OperationStatus.FAILED, message=outcome.reason,
                                               finishedAt=self._ts(), kind=outcome.kind):
            return outcome  # another replica ended this install first and said so
        if slug is not None:
            await self._phase(rid, cluster, slug, PhaseStatus.FAILED, finishedAt=self._ts(), message=outcome.reason)
        changed = (await self.state.install(cluster)).get("nodesChanged") == "1"
        await self._finished(rid, cluster, OperationStatus.FAILED, slug, outcome.node, outcome.reason, outcome.kind, changed,
                             inst.get("planDigest", ""))
        return outcome

    async def _unfinished_phase(self, cluster: str) -> Phase | None:
        """The install's first phase not finished yet (None: every one is)."""
        for phase in PHASES:
            if not decide.PhaseRecord.from_hash(await self.state.phase(cluster, phase.slug)).status.finished:
                return phase
        return None

    async def _input_records(self, cluster: str) -> dict[str, readiness.InputRecord]:
        return {k: readiness.InputRecord.from_doc(v) for k, v in (await self.state.inputs(cluster)).items()}

    async def _step(self, rid: str, cluster: str, plan: Plan, phase: Phase, inst: dict[str, str],
                    inputs: dict[str, readiness.InputRecord]) -> Outcome:
        """Carry out the pure decision (`decide.decide_step`) until it says wait, done or failed."""
        targets = self.targets(plan, phase)
        seen = decide.Observed(
            agents=await self.state.agent_count(cluster, [n.hostname for n in targets]) if "agents" in phase.needs else 0,
            inputs=inputs,
            sealed=await self.state.sealed_count(cluster, [n.hostname for n in plan.nodes]) if "certs" in phase.needs else 0,
            nodes=len(plan.nodes),
            plan_digest=inst.get("planDigest", ""),
        )
        while True:
            rec = decide.PhaseRecord.from_hash(await self.state.phase(cluster, phase.slug))
            d = decide.decide_step(phase.needs, phase.local, phase.concurrency, len(targets), rec, seen)
            if isinstance(d, decide.Send):
                await self._send(rid, cluster, plan, phase, targets[d.start : d.start + d.count], {}, d.start)
            elif isinstance(d, decide.Resend):
                await self._resend_retries(rid, cluster, plan, phase)
            elif isinstance(d, decide.RunLocal):
                return await self.local.run(d.name, plan)
            elif isinstance(d, (decide.Wait, decide.Succeed)):
                if d.progress is not None:
                    await self.state.set_phase(cluster, phase.slug, ok=d.progress)
                return Outcome("wait", delay=d.delay, reason=d.reason) if isinstance(d, decide.Wait) else DONE
            else:
                reason, node = decide.failed_nodes_reason(await self.state.all_commands(cluster, phase.slug))
                return Outcome("failed", reason=reason, node=node)

    async def reask_in_flight(self, cluster: str) -> list[str]:
        """After the state was restored from a backup (bke.adapters.state.epoch): send the running install's
        commands that the restored record still has in flight again, under a new message id, and
        name their nodes. Why: a result counted after the backup was taken and before the loss
        was acknowledged then, and is gone; the same command sent again under its own id falls in
        JetStream's duplicate window and is dropped, so the phase would wait for ever. An agent
        that ran the command answers it from its journal: nothing runs twice."""
        inst = await self.state.install(cluster)
        if inst.get("status") != OperationStatus.RUNNING:
            return []
        phase = await self._unfinished_phase(cluster)
        if phase is None:
            return []
        plan = await self.plans.load(cluster)
        cmds = await self.state.all_commands(cluster, phase.slug)
        gens = {h: int(c.get("gen", 0)) for h, c in cmds.items() if c.get("status") == "Sent"}
        nodes = [n for n in self.targets(plan, phase) if n.hostname in gens]
        if nodes:
            await self._send(inst["requestId"], cluster, plan, phase, nodes, gens, None, again=f"@restored:{self._ts()}")
        return [n.hostname for n in nodes]

    async def _send(self, rid, cluster, plan, phase, batch, gens: dict[str, int], start: int | None,
                    again: str = "") -> None:
        """Build, publish and record commands for `batch`; `start` is the phase cursor at
        batch[0] (None for retries, which do not move the cursor). `again`: a suffix of the
        message ids, for commands sent before whose answers were lost (`reask_in_flight`)."""
        sums = await self.checksums.for_plan(plan) if "checksums" in phase.needs else {}
        for i in range(0, len(batch), SEND_CHUNK):
            chunk = batch[i : i + SEND_CHUNK]
            names = [n.hostname for n in chunk]
            render = await self.files.get_many(cluster, "render", names)
            certs = await self.files.get_many(cluster, "certs", names) if "certs" in phase.needs else {}
            seals = await agent_sealers(self.files, cluster, names) if "agent-keys" in phase.needs else {}
            unsealed = [h for h in names if "certs" in phase.needs and certs.get(h) is None]
            if unsealed:
                # `certs.sealed` said so, but the bundle is not there (yet): never send a node an
                # empty certificates command; the runner comes back after the delay
                raise TemporaryError(f"no sealed bundle stored for {', '.join(unsealed[:5])}", delay=1.0)
            if self.prefetch is not None:
                await self.prefetch(cluster, names)
            sent, pubs = {}, []
            for node in chunk:
                h = node.hostname
                gen = gens.get(h, 0)
                inp = NodeInputs(render=render.get(h) or [], certs=certs.get(h) or [], checksums=sums, seal=seals.get(h))
                cmd = AgentCommand(
                    command_id=command_id(cluster, phase.slug, h, gen),
                    cluster=cluster,
                    node=h,
                    phase=phase.slug,
                    issued_at=self._ts(),
                    steps=phase.build(plan, node, inp) if phase.build else [],
                    operation=OperationRef(kind=OperationKind.INSTALL, id=rid or "", step=phase.slug),
                )
                body = await self.sign(cmd)  # the signed body, its canonical bytes written once
                sent[h] = {"id": cmd.command_id, "gen": gen, "status": "Sent", "step": "", "stderr": "", "at": cmd.issued_at}
                pubs.append(self.publish(body, agent_subject(cluster, h, "command"), {"Nats-Msg-Id": cmd.command_id + again}))
            # publish first, then record: a crash in between only re-publishes the same ids
            await asyncio.gather(*pubs)
            cursor = None if start is None else start + i + len(chunk)
            await self.state.mark_sent(cluster, phase.slug, sent, cursor, self._ts())
            await asyncio.gather(*(self._node_event(rid, cluster, h, phase.slug, RunStatus.RUNNING, None, "") for h in sent))

    async def _resend_retries(self, rid: str, cluster: str, plan: Plan, phase: Phase) -> None:
        cmds = await self.state.all_commands(cluster, phase.slug)
        retry = {h: c["gen"] for h, c in cmds.items() if c["status"] == "Retry"}
        nodes = [n for n in self.targets(plan, phase) if n.hostname in retry]
        await self._send(rid, cluster, plan, phase, nodes, retry, None)
        await self.state.set_phase(cluster, phase.slug, retry="")

    # events -------------------------------------------------------------------
    async def _phase(self, rid: str, cluster: str, slug: str, status: PhaseStatus, **fields: str) -> None:
        await self.state.set_phase(cluster, slug, status=status, **fields)
        ps = await self.state.phase(cluster, slug)
        ev = PhaseChanged(
            request_id=rid,
            cluster=cluster,
            phase=slug,
            status=status,
            at=self._ts(),
            message=fields.get("message", ""),
            done=int(ps.get("ok", 0)),
            total=int(ps.get("total", 0) or 0),
        )
        log.info("phase %s %s", slug, status, extra={"cluster": cluster, "phase": slug, "request_id": rid})
        await self.publish(ev.to_bytes(), install_subject(cluster, "phase"), {})

    async def _node_event(self, rid, cluster, node, slug, status, step, stderr) -> None:
        ev = NodeStepChanged(request_id=rid, cluster=cluster, node=node, phase=slug, status=status, at=self._ts(), step=step, stderr=stderr)
        await self.notify(ev.to_bytes(), install_subject(cluster, "node"), {})

    async def refuse(self, cluster: str, rid: str, why: str) -> None:
        """End a Running install that may not run (another operation holds the cluster's slot),
        with the reason, as any failed install: `install finished` Failed, nothing changed."""
        inst = await self.state.install(cluster)
        await self._fail(rid, cluster, inst, Outcome("failed", reason=why, kind="operational"))

    async def _finished(self, rid, cluster, status, phase, node, message, kind, nodes_changed: bool, digest: str) -> None:
        # an install that has ended (either way) frees the cluster's operation slot; `bke retry`
        # claims it again (results.py)
        await release_operation(self.state.r, cluster, "install", rid)
        ev = InstallFinished(request_id=rid, cluster=cluster, status=status, at=self._ts(), phase=phase, node=node,
                             message=message, kind=kind, nodes_changed=nodes_changed, plan_digest=digest)
        log.info("install %s", status, extra={"cluster": cluster, "request_id": rid, "phase": phase})
        # `at` in the id: a retried install may end the same way twice within the duplicate window
        await self.publish(ev.to_bytes(), install_subject(cluster, "finished"), {"Nats-Msg-Id": f"finished:{cluster}:{rid}:{status}:{ev.at}"})

    async def set_total(self, cluster: str, plan: Plan) -> None:
        for phase in PHASES:
            await self.state.set_phase(cluster, phase.slug, total=len(phase.targets(plan)))
