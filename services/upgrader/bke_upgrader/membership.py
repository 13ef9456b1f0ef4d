"""A changed spec's removals and joins, the adapters: the apply run asks the dispatcher to
remove or join workers (`RemoveNodes` / `JoinNodes`, `partOf` the run: inside its operation
slot) and carries on when the dispatcher's `*.finished` answers. Which nodes, in which order,
is `bke.core.lifecycle.apply_run`'s; how a node joins or leaves is the dispatcher's.

    remove-nodes step  -> RemoveNodes of the batch (the stored plan still names its nodes);
                          waits (TemporaryError) until its answer is recorded
    join-nodes step    -> the run's plan swapped in first (compare-and-swap on the digest the
                          run started from; already swapped after a crash: nothing to do), then
                          JoinNodes of the batch with that plan's digest; waits likewise
    *.finished         -> recorded beside the run's agent answers (`bke:<c>:upgrade:results`,
                          field `membership:<request id>`) if it answers this run, and the run
                          woken

Request ids are fixed per run, step and batch: asking again after a crash is the same request
(JetStream drops the repeat in its window; the dispatcher answers a known request id from its
record, and a finished one with its `finished` again), so nothing is joined or removed twice.
A refusal or failure fails the step with the dispatcher's reason; the run stops there. A
dispatcher that does not answer a batch within the service answer deadline (answer_deadline.py,
BKE_UPGRADER_SERVICE_ANSWER_TIMEOUT_S) fails the step naming it.
"""
from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bke.contracts.statuses import RunStatus
from bke.contracts.membership import (
    JOIN_NODES, REMOVE_NODES, JoinNodes, JoinNodesFinished, MembershipEtcdJoin, MembershipRejoin, RemoveNodes, RemoveNodesFinished,
)
from bke.core.errors import TemporaryError
from bke.core.lifecycle.apply_run import JOIN_STEP, REMOVE_STEP, member_join
from bke.core.plan import Plan
from bke.adapters.state.keys.upgrader import upgrade_results_key
from bke.core.upgrade.run import StepRun, UpgradeRun, mark_local, mark_local_batch
from bke.adapters.bus.handler import Publish

from .answer_deadline import DEFAULT_TIMEOUT_S, AnswerDeadline, silent_service
from .store import UpgradeStore

__all__ = ["ApplyMembership", "membership_request_id"]

log = logging.getLogger("bke.upgrader.membership")
FIELD = "membership:"  # the results hash's field prefix for a dispatcher's answer
WAIT_S = 10.0  # look again this often without an answer (the answer's kick comes first)


def membership_request_id(apply_request_id: str, step: str, group: str, batch: int) -> str:
    """The request id of one batch of a membership step: fixed per run, step, group (an etcd
    member's join: "<etcd cluster>:<member>") and batch, at most 128 characters (the contract's limit)."""
    rid = f"{apply_request_id}.{step}{'.' + group if group else ''}.{batch}"
    if len(rid) <= 128:
        return rid
    return f"{hashlib.sha256(rid.encode()).hexdigest()[:40]}.{step}.{batch}"


class ApplyMembership:
    def __init__(self, store: UpgradeStore, publish: Publish, kick: Callable[[str], None] = lambda c: None,
                 answer_timeout_s: float = DEFAULT_TIMEOUT_S, now: Callable[[], float] = time.time):
        self.store, self.publish, self.kick = store, publish, kick
        self.deadline = AnswerDeadline(store, answer_timeout_s, now)

    async def _answer(self, cluster: str, request_id: str) -> dict[str, Any] | None:
        raw = await self.store.r.hget(upgrade_results_key(cluster), FIELD + request_id)
        return None if raw is None else json.loads(raw)

    # the local steps ---------------------------------------------------------
    async def carry(self, run: UpgradeRun, step: StepRun, old: Plan, new: Plan,
                    swap: Callable[[UpgradeRun, Plan], Awaitable[str]]) -> None:
        """Carry a membership step one batch further: the batch's answer recorded (on to the next
        batch, or the step failed with the reason), or the request sent and waiting
        (TemporaryError). `swap`: stores the run's plan, returns its digest (a join needs the
        stored plan to name the new nodes). A join step of group "<etcd cluster>:<member>" joins
        a new etcd member, already added as a learner (in each etcd cluster it joins), with the
        member list it starts with in each."""
        rid = membership_request_id(run.request_id, step.name, step.group, step.batch)
        hosts = step.current()
        answer = await self._answer(run.cluster, rid)
        if answer is not None:
            if answer["status"] == RunStatus.SUCCEEDED:
                mark_local_batch(step)
                self.deadline.next_batch(step)
                log.info("%s: %s done", step.name, ", ".join(hosts[:10]), extra={"cluster": run.cluster,
                                                                                   "request_id": run.request_id})
            else:
                mark_local(step, False, f"the dispatcher: {answer.get('reason', '')}"[:2000])
            return
        ids = {"cluster": run.cluster, "request_id": run.request_id}
        waited = await self.deadline.overdue(run, step)
        if waited is not None:
            why = silent_service("dispatcher", f"{step.name} request {rid} ({', '.join(hosts[:5])})", waited,
                                 "apply the spec again")
            log.warning("%s", why, extra=ids)
            mark_local(step, False, why)
            return
        if step.name == JOIN_STEP:
            digest = await swap(run, new)
            joins = None
            if step.group:  # its start in every etcd cluster it joins (apply_members.member_steps)
                joins = [MembershipEtcdJoin(etcd_cluster=c, member=member, initial_cluster=initial)
                         for c, member, initial in member_join(old, new, step.group)]
            # nodes in the cluster already, joining again with more parts (apply_run._rejoin):
            # what they run and keep (an etcd member a node leaves, "moves", is taken away after)
            rejoin = [MembershipRejoin(hostname=h, running=[c for c in old.node(h).components if new.node(h).runs(c)])
                      for h in hosts if h in old.node_index[1]] or None
            req: JoinNodes | RemoveNodes = JoinNodes(request_id=rid, cluster=run.cluster, plan_digest=digest,
                                                     nodes=hosts, part_of=run.request_id, etcd_joins=joins,
                                                     rejoin=rejoin)
            subject = JOIN_NODES
        elif step.name == REMOVE_STEP:
            req, subject = RemoveNodes(request_id=rid, cluster=run.cluster, nodes=hosts, part_of=run.request_id), REMOVE_NODES
        else:  # pragma: no cover - the run's table names only these two
            raise ValueError(f"{step.name} is no membership step")
        await self.publish(req.to_bytes(), subject, {"Nats-Msg-Id": f"{subject}:{run.cluster}:{rid}"})
        log.info("%s asked: %d node(s)", step.name, len(hosts), extra=ids)
        raise TemporaryError(f"waiting for the dispatcher: {step.name} of {', '.join(hosts[:5])}"
                             f"{' and more' if len(hosts) > 5 else ''}", delay=WAIT_S)

    # the dispatcher's answers ------------------------------------------------------
    async def on_finished(self, ev: JoinNodesFinished | RemoveNodesFinished) -> None:
        run = await self.store.load(ev.cluster, fresh=True)
        if run is None or not run.running:
            return  # another run's, or one that ended
        mine = {membership_request_id(run.request_id, s.name, s.group, b)
                for s in run.steps if s.name in (JOIN_STEP, REMOVE_STEP) for b in range(len(s.batches))}
        if ev.request_id not in mine:
            return
        doc = {"status": ev.status, "reason": ev.reason,
               "nodes": [n.model_dump(by_alias=True) for n in ev.nodes]}
        if isinstance(ev, RemoveNodesFinished):
            doc["revokeIdentities"] = list(ev.revoke_identities)
        await self.store.r.hset(upgrade_results_key(ev.cluster), FIELD + ev.request_id, json.dumps(doc))
        self.kick(ev.cluster)
