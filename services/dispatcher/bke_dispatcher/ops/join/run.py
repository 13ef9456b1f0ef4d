"""Joining workers and etcd-only nodes, the adapters: the join's record in Redis, its start, the
services' answers, and its carriers on the one loop (bke.adapters.operation). Decisions are
`decide`'s.

    bke:<c>:join           string  the cluster's current (or last) join, JSON
    bke:<c>:join:results   hash    command id -> an agent's answer; input:render, input:certs ->
                                   the services' answers with the join's request id
    bke:joins              set     clusters with a join record (resumed after a restart)

    JoinNodes              -> refused: `join-nodes.finished` Failed with the reason; else the
                              record is started in the cluster's operation slot (or the apply
                              run's it is part of) and the loop woken
    manifests rendered/failed, certs issued/failed with the join's request id
                           -> recorded beside the record (the install's own inputs are
                              untouched: a finished install is never reopened)
    ask                       the renderer renders the stored plan, the certs service ensures its PKI
    send                      each ready node's command for its next phase
    label                     the node-labels phase's marks, for the new nodes only
    the end                -> `join-nodes.finished` (de-duplicated by its id), once

Errors (see bke.core.errors): a malformed request is dead-lettered; a refused one is answered as
above and acked (also when the cluster's join record is in a form this dispatcher does not read:
a newer dispatcher wrote it, the reason says to upgrade this one); Redis away holds it; anything
else is redelivered, and after the maximum deliveries answered `join-nodes.finished` Failed with
the error (ops.membership.give_up). An API that refuses a label patch (4xx) fails the join; one
that is away (TemporaryError) makes the runner come back. New nodes whose agents never register
fail the join at its agents' deadline.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime

from redis.asyncio import Redis

from bke.adapters.bus.handler import Out
from bke.adapters.cluster_api.labels import marks_from_record, record, wanted
from bke.adapters.cluster_api.node_labels import NodeMarker
from bke.adapters.operation import EndEvent, Publish, RecordStore
from bke.core.secrets.record_signing import RecordKeyError, RecordSignatureError
from bke.adapters.state import PlanCache
from bke.adapters.state.command_signing import Sign
from bke.adapters.state.keys.plan import plan_meta_key
from bke.adapters.state.keys.dispatcher import join_key, join_results_key, joins_index, node_labels_key, sealed_key
from bke.adapters.state.nodefiles import RedisNodeFiles
from bke.contracts.base import Message
from bke.contracts.certs import ISSUE_CERTS, CertsFailed, CertsIssued, IssueCerts
from bke.contracts.membership import (
    JOIN_NODES_FINISHED, JoinNodes, JoinNodesChanged, JoinNodesFinished, join_changed_subject,
)
from bke.contracts.render import RENDER_MANIFESTS, ManifestsRendered, RenderFailed, RenderManifests
from bke.contracts.statuses import FinishedStatus, InputStatus, PhaseNeed
from bke.core.errors import TemporaryError
from bke.core.operation import Act, Answers, Decision, Fail, RunStatus, Wait
from bke.core.plan import NodePlan, Plan

from ...ports import Checksums
from ...phases import NodeInputs, agent_sealers, phase_by_slug
from ...state import DispatcherState
from ..membership.gates import Busy, Gates, Judged, MembershipLoop, end_fields
from .decide import (
    AGENTS_DEADLINE_S, Join, command_of, fold_answers, is_join_request, join_refusal, new_join, next_step,
)

__all__ = ["JoinStore", "Joins"]

log = logging.getLogger("bke.dispatcher.join")


class JoinStore(RecordStore[Join]):
    def __init__(self, redis: Redis):
        super().__init__(redis, Join.from_json, join_key, join_results_key, joins_index())


class Joins(MembershipLoop[Join, JoinNodes]):
    def __init__(self, store: JoinStore, state: DispatcherState, plans: PlanCache, files: RedisNodeFiles,
                 checksums: Checksums, marker: NodeMarker, busy: Callable[[str], Awaitable[Busy | None]],
                 paused: Callable[[str], Awaitable[bool]], publish: Publish, now: Callable[[], datetime], owner: str,
                 lease_ms: int = 15000, kick: Callable[[str], None] | None = None, *, sign: Sign,
                 agents_deadline_s: float = AGENTS_DEADLINE_S):
        super().__init__(store, publish, now, owner, lease_ms, kick, sign=sign, kind="join",
                         carriers={"ask": self._ask, "send": self._send, "label": self._label}, log=log)
        self.state, self.plans, self.files, self.checksums, self.marker = state, plans, files, checksums, marker
        self.busy, self.paused, self.agents_deadline_s = busy, paused, agents_deadline_s

    # the loop's hooks ---------------------------------------------------------------------
    def fold(self, rec: Join, answers: Answers) -> bool:
        return fold_answers(rec, answers)

    async def decider(self, rec: Join) -> Callable[[Join], Decision]:
        """The join's decide, with the nodes whose bundle is sealed to their agent and the clock."""
        names = [n.hostname for n in rec.nodes]
        flags = await self.store.redis.smismember(sealed_key(rec.cluster), names)
        sealed = frozenset(h for h, on in zip(names, flags) if on)
        now = self.now()
        return lambda j: next_step(j, sealed, now, self.agents_deadline_s)

    def waited(self, rec: Join, wait: Wait) -> bool:
        changed = rec.waiting != wait.reason
        rec.waiting = wait.reason
        if wait.since and not rec.agents_since:  # the agents' deadline runs from here (decide.next_step)
            rec.agents_since, changed = wait.since, True
        return changed

    def changed(self, rec: Join, at: str) -> tuple[Message, str]:
        return JoinNodesChanged(cluster=rec.cluster, at=at, join=rec.view()), join_changed_subject(rec.cluster)

    def finished_event(self, rec: Join) -> EndEvent:
        ev = JoinNodesFinished(**end_fields(rec), plan_digest=rec.plan_digest, nodes=rec.node_views())
        return EndEvent(ev, JOIN_NODES_FINISHED, f"join-finished:{rec.cluster}:{rec.request_id}")

    # requests -------------------------------------------------------------------------------
    async def judged(self, req: JoinNodes, gates: Gates) -> Judged[Join]:
        """Judged against the stored plan and its digest; the join built on that plan."""
        plan = gates.plan
        raw_digest = await self.store.redis.hget(plan_meta_key(req.cluster), "digest") or ""
        digest = raw_digest.decode() if isinstance(raw_digest, bytes) else raw_digest

        def check(cur: Join | None) -> str:
            return join_refusal(req, plan, digest, gates.install, busy=gates.busy_text, paused=gates.paused,
                                current=cur)

        return Judged(check, lambda: None if plan is None else new_join(req, plan, self._ts()))

    def refused(self, req: JoinNodes, why: str, kind: str) -> Out:
        ev = JoinNodesFinished(request_id=req.request_id, cluster=req.cluster, status=FinishedStatus.FAILED, reason=why,
                               plan_digest=req.plan_digest, at=self._ts(), kind=kind)
        return Out(ev, JOIN_NODES_FINISHED, msg_id=f"join-finished:{req.request_id}")

    # the renderer's and the certs service's answers -------------------------------------------
    async def _input(self, cluster: str, request_id: str, name: str, status: str, digest: str, reason: str) -> bool:
        """Record a service's answer to a join; False if it is not about this cluster's join."""
        if not is_join_request(request_id):
            return False
        await self.store.record_input(cluster, name, request_id, status, digest, reason)
        self.kick(cluster)
        return True

    async def rendered(self, ev: ManifestsRendered) -> bool:
        return await self._input(ev.cluster, ev.request_id, "render", InputStatus.READY, ev.plan_digest, "")

    async def render_failed(self, ev: RenderFailed) -> bool:
        return await self._input(ev.cluster, ev.request_id, "render", InputStatus.FAILED, ev.plan_digest,
                                 "renderer: " + "; ".join(ev.errors))

    async def certs_issued(self, ev: CertsIssued) -> bool:
        return await self._input(ev.cluster, ev.request_id, "certs", InputStatus.READY, ev.plan_digest, "")

    async def certs_failed(self, ev: CertsFailed) -> bool:
        return await self._input(ev.cluster, ev.request_id, "certs", InputStatus.FAILED, ev.plan_digest, "certs: " + ev.reason)

    # the carriers -----------------------------------------------------------------------------
    async def _ask(self, j: Join, d: Act) -> Decision | None:
        """The renderer renders the stored plan (the joining etcd members' manifests as joins of
        their running clusters), the certs service ensures its PKI and seals the new nodes'
        bundles; each answers with the join's slug as request id."""
        etcd = [e.message() for e in j.etcd_joins] or None  # a workers-only join: the field left out
        render = RenderManifests(request_id=j.slug, cluster=j.cluster, etcd_joins=etcd)
        await self.publish(render.to_bytes(), RENDER_MANIFESTS, {"Nats-Msg-Id": f"render:{j.cluster}:{j.slug}"})
        certs = IssueCerts(request_id=j.slug, cluster=j.cluster, purpose="join")
        await self.publish(certs.to_bytes(), ISSUE_CERTS, {"Nats-Msg-Id": f"certs:{j.cluster}:{j.slug}"})
        j.asked = True
        return None

    async def _send(self, j: Join, d: Act) -> Decision | None:
        """Each node's command for its current phase, built as the install builds it."""
        runs = [r for r in j.nodes if r.hostname in d.nodes]
        names = [r.hostname for r in runs]
        try:
            plan = await self.plans.load(j.cluster)
            render = await self.files.get_many(j.cluster, "render", names)
        except (RecordSignatureError, RecordKeyError) as exc:
            return Fail(str(exc))  # not signed by its writer: no command is built from it
        certs = await self.files.get_many(j.cluster, "certs", names)
        sums: dict[str, str] | None = None
        seals: dict[str, Callable[[bytes], bytes] | None] | None = None
        for run in runs:
            phase = phase_by_slug(run.phases[run.index])
            if PhaseNeed.CHECKSUMS in phase.needs and sums is None:
                sums = await self.checksums.for_plan(plan)
            if PhaseNeed.AGENT_KEYS in phase.needs and seals is None:
                seals = await agent_sealers(self.files, j.cluster, names)
            if PhaseNeed.CERTS in phase.needs and not certs.get(run.hostname):
                # said sealed, but the bundle is not there (yet): never send an empty certificates command
                raise TemporaryError(f"no sealed bundle stored for {run.hostname}", delay=1.0)
            inp = NodeInputs(render=render.get(run.hostname) or [], certs=certs.get(run.hostname) or [],
                             checksums=sums or {}, held_ports=tuple(j.held_ports.get(run.hostname, ())),
                             seal=(seals or {}).get(run.hostname))
            steps = phase.build(plan, plan.node(run.hostname), inp) if phase.build else []
            cid = command_of(j, run)
            await self.send_command(j.cluster, run.hostname, cid, phase.slug, steps)
            run.command_id, run.status = cid, RunStatus.RUNNING
        return None

    async def _label(self, j: Join, d: Act) -> Decision | None:
        """The node-labels phase's marks for the new nodes that register a Node (an etcd-only
        node registers none); a Node not there yet is waited for, a patch refused fails the join."""
        plan = await self.plans.load(j.cluster)
        nodes = [n for n in plan.nodes if n.hostname in d.nodes and n.registers]
        if nodes:
            why = await self._mark(j, plan, nodes)
            if why is not None:
                return why
        j.labelled = True
        return None

    async def _mark(self, j: Join, plan: Plan, nodes: list[NodePlan]) -> Decision | None:
        key = node_labels_key(j.cluster)
        stored = await self.store.redis.hmget(key, [n.hostname for n in nodes])
        batch = [(n, wanted(n), marks_from_record(json.loads(raw) if raw else None)) for n, raw in zip(nodes, stored)]
        try:
            got = await self.marker.mark(plan, batch)
        except ValueError as exc:  # the API refused a patch: retrying will not help
            return Fail(f"node labels: {exc}")
        marks = {n.hostname: want for n, want, _ in batch}
        if got.applied:
            at = self._ts()
            await self.store.redis.hset(key, mapping={h: json.dumps(record(marks[h], how, at))
                                                      for h, how in got.applied.items()})
        if got.missing or got.conflicts:
            return Wait(f"waiting for the Node objects of {', '.join(sorted(got.missing + got.conflicts)[:5])}")
        return None
