"""Joining workers, the adapters: the join's record (membership_store), its handlers, and the
reconcile step the join runner calls. Decisions are `join`'s; this module reads, writes and
publishes around them (the shape of resets.py).

    JoinNodes                -> refused: `join-nodes.finished` Failed with the reason; else the
                                record is started and the runner woken
    manifests rendered/failed, certs issued/failed with the join's request id
                             -> recorded beside the record (the install's own inputs are
                                untouched: a finished install is never reopened)
    an agent's result        -> recorded beside the record (LeasedOperation.on_result)
    reconcile                -> fold answers in, decide, carry the decision out, publish the
                                view on `join-nodes.<c>.changed`; at the end `join-nodes.finished`

Errors (see bke.core.errors): a malformed request is dead-lettered; a refused one is answered as
above and acked (also when the cluster's join record is in a form this dispatcher does not read:
a newer dispatcher wrote it, the reason says to upgrade this one); Redis away holds it; anything else is redelivered, and after the maximum
deliveries answered `join-nodes.finished` Failed with the error (membership_give_up). An API
that refuses a label patch (4xx) fails the join; one that is away (TemporaryError) makes the
runner come back. New nodes whose agents never register fail the join at its agents' deadline.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from bke.adapters.bus.handler import Out
from bke.contracts.agent import AgentCommand, agent_subject
from bke.contracts.certs import ISSUE_CERTS, CertsFailed, CertsIssued, IssueCerts
from bke.contracts.membership import (
    JOIN_NODES_FINISHED, JoinNodes, JoinNodesChanged, JoinNodesFinished, join_changed_subject,
)
from bke.adapters.state.operation_slot import release_operation
from bke.contracts.render import RENDER_MANIFESTS, ManifestsRendered, RenderFailed, RenderManifests
from bke.core.errors import TemporaryError
from bke.core.plan import Plan
from bke.adapters.state import PlanCache
from bke.adapters.state.keys import node_labels_key, plan_meta_key, sealed_key
from bke.adapters.state.nodefiles import RedisNodeFiles

from ...engine import Checksums, Outcome
from .decide import (
    AGENTS_DEADLINE_S, Join, JoinRun, apply_result, command_of, is_join_request, join_refusal, new_join, next_step,
)
from bke.adapters.cluster_api.labels import marks_from_record, record, wanted
from ...leased import LeasedOperation
from ..membership.gates import Busy, INPUT_PREFIX, OperationStore, read_gates, start_operation
from bke.adapters.cluster_api.node_labels import NodeMarker
from ...phases import NodeInputs, agent_sealers, phase_by_slug
from bke.adapters.state.command_signing import Sign
from ...state import DispatcherState

__all__ = ["Joins"]

log = logging.getLogger("bke.dispatcher.join")
Publish = Callable[[bytes, str, dict[str, str]], Awaitable[None]]
LEASE = "join"
WAIT_S = 5.0  # re-check even without an answer (a restart, a lost kick)


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else v


class Joins(LeasedOperation):
    LEASE = LEASE

    def __init__(self, store: OperationStore[Join], state: DispatcherState, plans: PlanCache, files: RedisNodeFiles,
                 checksums: Checksums, marker: NodeMarker, busy: Callable[[str], Awaitable[Busy | None]],
                 paused: Callable[[str], Awaitable[bool]], publish: Publish, now: Callable[[], datetime], owner: str,
                 lease_ms: int = 15000, kick: Callable[[str], None] | None = None, *, sign: Sign,
                 agents_deadline_s: float = AGENTS_DEADLINE_S):
        self.store, self.state, self.plans, self.files, self.checksums = store, state, plans, files, checksums
        self.agents_deadline_s = agents_deadline_s
        self.marker, self.busy, self.paused, self.publish, self.sign = marker, busy, paused, publish, sign
        self.now, self.owner, self.lease_ms = now, owner, lease_ms
        self.kick: Callable[[str], None] = kick or (lambda cluster: None)

    def _ts(self) -> str:
        return self.now().isoformat()

    # requests -------------------------------------------------------------------
    async def on_request(self, req: JoinNodes) -> list[Out]:
        ids = {"cluster": req.cluster, "request_id": req.request_id}
        current, unreadable = await self.store.load_judged(req.cluster)
        if current is not None and current.request_id == req.request_id:  # a redelivery
            self.kick(req.cluster)
            return []
        g, outside = (await read_gates(req.cluster, self.plans, self.state, self.busy, self.paused)).within(
            req.cluster, req.part_of)
        plan = g.plan
        digest = _s(await self.state.r.hget(plan_meta_key(req.cluster), "digest") or "")

        def check(cur: Join | None) -> str:
            return join_refusal(req, plan, digest, g.install, busy=g.busy_text, paused=g.paused, current=cur)

        why = unreadable or outside or check(current)
        if not why and plan is not None:
            # the cluster's one operation slot (bke.adapters.state.operation_slot): atomic against every
            # other kind; released again if the record refuses after all (or the slot of the
            # apply run this join is part of)
            j = new_join(req, plan, self._ts())
            why = await start_operation(self.state.r, req.cluster, "join", req.request_id, req.part_of, self._ts(),
                                        lambda: self.store.start(j, check))
        if why or plan is None:
            log.warning("join refused: %s", why, extra=ids)
            ev = JoinNodesFinished(request_id=req.request_id, cluster=req.cluster, status="Failed", reason=why,
                                   plan_digest=req.plan_digest, at=self._ts(),
                                   kind="operational" if unreadable else "invalid")
            return [Out(ev, JOIN_NODES_FINISHED, msg_id=f"join-finished:{req.request_id}")]
        log.info("join started: %d node(s)", len(j.nodes), extra=ids)
        await self._changed(j)
        self.kick(req.cluster)
        return []

    # the renderer's and the certs service's answers -------------------------------------
    async def _input(self, cluster: str, request_id: str, name: str, status: str, digest: str, reason: str) -> bool:
        """Record a service's answer to a join; False if it is not about this cluster's join."""
        if not is_join_request(request_id):
            return False
        await self.store.record_input(cluster, name, request_id, status, digest, reason)
        self.kick(cluster)
        return True

    async def rendered(self, ev: ManifestsRendered) -> bool:
        return await self._input(ev.cluster, ev.request_id, "render", "Ready", ev.plan_digest, "")

    async def render_failed(self, ev: RenderFailed) -> bool:
        return await self._input(ev.cluster, ev.request_id, "render", "Failed", ev.plan_digest,
                                 "renderer: " + "; ".join(ev.errors))

    async def certs_issued(self, ev: CertsIssued) -> bool:
        return await self._input(ev.cluster, ev.request_id, "certs", "Ready", ev.plan_digest, "")

    async def certs_failed(self, ev: CertsFailed) -> bool:
        return await self._input(ev.cluster, ev.request_id, "certs", "Failed", ev.plan_digest, "certs: " + ev.reason)

    # the reconcile step -----------------------------------------------------------------
    async def _changed(self, j: Join) -> None:
        ev = JoinNodesChanged(cluster=j.cluster, at=self._ts(), join=j.view())
        await self.publish(ev.to_bytes(), join_changed_subject(j.cluster), {})

    async def _finished(self, j: Join) -> None:
        # published first (de-duplicated by its id), then marked: a crash between re-publishes the same
        ev = JoinNodesFinished(request_id=j.request_id, cluster=j.cluster, status=j.status,  # type: ignore[arg-type]
                               reason=j.message, plan_digest=j.plan_digest, nodes=j.node_views(), at=j.finished_at,
                               kind="operational" if j.status == "Failed" else None)
        await self.publish(ev.to_bytes(), JOIN_NODES_FINISHED, {"Nats-Msg-Id": f"join-finished:{j.cluster}:{j.request_id}"})
        j.finished_sent = True
        await self.store.save(j)

    def _fold(self, j: Join, results: dict[str, dict[str, str]]) -> bool:
        changed = False
        for key, doc in results.items():
            if key.startswith(INPUT_PREFIX):
                name = key.removeprefix(INPUT_PREFIX)
                if doc.get("requestId") != j.slug or name not in ("render", "certs"):
                    continue  # an answer to an earlier join
                status = doc["status"]
                if status == "Ready" and doc.get("digest") and doc["digest"] != j.plan_digest:
                    status, doc = "Failed", {**doc, "reason": f"{name}: the stored plan changed during the join "
                                                              f"({doc['digest'][:12]}, not {j.plan_digest[:12]})"}
                if getattr(j, name) != status:
                    setattr(j, name, status)
                    j.input_reason = doc.get("reason", "") if status == "Failed" else j.input_reason
                    changed = True
            else:
                changed |= apply_result(j, key, doc["status"], doc["step"], doc["stderr"])
        return changed

    async def _reconcile(self, cluster: str) -> Outcome:
        j = await self.store.load(cluster)
        if j is None:
            return Outcome("done")
        if j.status != "Running":
            await release_operation(self.state.r, cluster, "join", j.request_id)  # again: idempotent
            if not j.finished_sent:
                await self._finished(j)
            return Outcome("done")
        changed = self._fold(j, await self.store.results(cluster))
        names = [n.hostname for n in j.nodes]
        sealed = frozenset(h for h, on in zip(names, await self.state.r.smismember(sealed_key(cluster), names)) if on)
        now = self.now()
        d = next_step(j, sealed, now, self.agents_deadline_s)
        if d.agents_since and not j.agents_since:  # the agents' deadline runs from here (join.next_step)
            j.agents_since, changed = d.agents_since, True
        if d.action == "ask":
            await self._ask(j)
            changed = True
        elif d.action == "send":
            await self._send(j, await self.plans.load(cluster), set(d.nodes))
            changed = True
        elif d.action == "label":
            outcome = await self._label(j, await self.plans.load(cluster))
            if outcome is not None and outcome.status == "failed":
                d = type(d)("fail", reason=outcome.reason)
            elif outcome is not None:
                changed |= j.waiting != outcome.reason
                j.waiting = outcome.reason
            else:
                j.labelled, changed = True, True
                d = next_step(j, sealed, now, self.agents_deadline_s)
        if d.action == "wait" and j.waiting != d.reason:
            j.waiting, changed = d.reason, True
        if d.action in ("succeed", "fail"):
            j.status = "Succeeded" if d.action == "succeed" else "Failed"
            j.message, j.finished_at, j.waiting = d.reason, self._ts(), ""
            changed = True
            log.info("join %s %s", j.status, d.reason, extra={"cluster": cluster, "request_id": j.request_id})
        if changed:
            await self.store.save(j)
            await self._changed(j)
        if j.status != "Running":
            # freed before the end is announced: whoever sees it may start the next operation
            await release_operation(self.state.r, cluster, "join", j.request_id)
            await self._finished(j)
            return Outcome("done") if j.status == "Succeeded" else Outcome("failed", reason=j.message)
        return Outcome("wait", delay=WAIT_S, reason=j.waiting)

    async def _ask(self, j: Join) -> None:
        """The renderer renders the stored plan (the joining etcd members' manifests as joins of
        their running clusters), the certs service ensures its PKI and seals the new nodes'
        bundles; each answers with the join's slug as request id."""
        etcd = [e.message() for e in j.etcd_joins] or None  # a workers-only join: the field left out
        render = RenderManifests(request_id=j.slug, cluster=j.cluster, etcd_joins=etcd)
        await self.publish(render.to_bytes(), RENDER_MANIFESTS, {"Nats-Msg-Id": f"render:{j.cluster}:{j.slug}"})
        certs = IssueCerts(request_id=j.slug, cluster=j.cluster, purpose="join")
        await self.publish(certs.to_bytes(), ISSUE_CERTS, {"Nats-Msg-Id": f"certs:{j.cluster}:{j.slug}"})
        j.asked = True

    async def _send(self, j: Join, plan: Plan, hosts: set[str]) -> None:
        runs = [r for r in j.nodes if r.hostname in hosts]
        by_name = {n.hostname: n for n in plan.nodes if n.hostname in hosts}
        names = [r.hostname for r in runs]
        render = await self.files.get_many(j.cluster, "render", names)
        certs = await self.files.get_many(j.cluster, "certs", names)
        sums: dict[str, str] | None = None
        seals: dict[str, Callable[[bytes], bytes] | None] | None = None
        for run in runs:
            phase = phase_by_slug(run.phases[run.index])
            if "checksums" in phase.needs and sums is None:
                sums = await self.checksums.for_plan(plan)
            if "agent-keys" in phase.needs and seals is None:
                seals = await agent_sealers(self.files, j.cluster, names)
            if "certs" in phase.needs and not certs.get(run.hostname):
                # said sealed, but the bundle is not there (yet): never send an empty certificates command
                raise TemporaryError(f"no sealed bundle stored for {run.hostname}", delay=1.0)
            inp = NodeInputs(render=render.get(run.hostname) or [], certs=certs.get(run.hostname) or [], checksums=sums or {},
                             held_ports=tuple(j.held_ports.get(run.hostname, ())), seal=(seals or {}).get(run.hostname))
            await self._command(j, run, phase.slug, phase.build(plan, by_name[run.hostname], inp) if phase.build else [])

    async def _command(self, j: Join, run: JoinRun, phase: str, steps: list[Any]) -> None:
        cid = command_of(j, run)
        cmd = await self.sign(AgentCommand(command_id=cid, cluster=j.cluster, node=run.hostname, phase=phase,
                                           issued_at=self._ts(), steps=steps))
        # publish before recording it as sent: a crash in between re-publishes the same id
        await self.publish(cmd.to_bytes(), agent_subject(j.cluster, run.hostname, "command"), {"Nats-Msg-Id": cid})
        run.command_id, run.status = cid, "Running"

    async def _label(self, j: Join, plan: Plan) -> Outcome | None:
        """The node-labels phase's marks for the new nodes only (None when every one carries them)."""
        hosts = {r.hostname for r in j.nodes}
        nodes = [n for n in plan.nodes if n.hostname in hosts and n.registers]
        if not nodes:
            return None
        key = node_labels_key(j.cluster)
        stored = await self.state.r.hmget(key, [n.hostname for n in nodes])
        batch = [(n, wanted(n), marks_from_record(json.loads(raw) if raw else None)) for n, raw in zip(nodes, stored)]
        try:
            got = await self.marker.mark(plan, batch)
        except ValueError as exc:  # the API refused a patch: retrying will not help
            return Outcome("failed", reason=f"node labels: {exc}")
        marks = {n.hostname: want for n, want, _ in batch}
        if got.applied:
            at = self._ts()
            await self.state.r.hset(key, mapping={h: json.dumps(record(marks[h], how, at)) for h, how in got.applied.items()})
        if got.missing or got.conflicts:
            return Outcome("wait", delay=WAIT_S, reason=f"waiting for the Node objects of {', '.join(sorted(got.missing + got.conflicts)[:5])}")
        return None

    async def resume_all(self) -> list[str]:
        resumed = []
        for cluster in await self.store.clusters():
            j = await self.store.load(cluster)
            if j is not None and (j.status == "Running" or not j.finished_sent):
                self.kick(cluster)
                resumed.append(cluster)
        return resumed
