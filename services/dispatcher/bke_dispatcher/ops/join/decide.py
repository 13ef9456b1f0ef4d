"""Joining workers and etcd-only nodes to a running cluster, the pure part: may a join start,
which of the install's phases each new node runs, and what comes next. No Redis, no bus, no clock.

The caller (bke apply's runner) has swapped in a plan that names the new nodes (kubeadm's
`join` for a worker: the cluster exists, only the node's own credentials and kubelet are
new). An etcd-only node (roles etcd, etcd-event, etcd-pod; no master) joins too when the
request names it in `etcd_joins` for every etcd cluster it is a member of: the caller has added
it to each as a learner already and promotes it after the join (bke.core.lifecycle.etcd_members);
here it is started with `--initial-cluster-state=existing` and the caller's `initial_cluster`.
Masters are refused: a control-plane scale-out is not a join. A join then:
  1. asks the renderer to render the stored plan (with the etcd joins) and the certs service to
     ensure the PKI and seal bundles (both answer with the join's request id and the plan's digest);
  2. waits for both answers and for every new node's bundle sealed to its provisioned agent,
     the latter at most `agents_deadline_s` (the record keeps when that wait began): an agent
     that never registers fails the join naming the node and how to provision its agent;
  3. runs, per node and independently of the others, the install's phases that target that
     node (`node_phases`: for a worker node-env, certs, workers, health; for an etcd-only node
     node-env, certs, etcd, health), one command each, with
     a fixed id (`<cluster>/join@<rid>/<node>/<phase index>`): a redelivered or re-sent
     command is the same command, which an agent that ran it only replays;
  4. labels the new nodes that register a Node (the node-labels phase's marks, for these nodes
     only; an etcd-only node registers none), then succeeds.
A failed input (render, certs) or node fails the join with the reason. No other node receives
anything: the only commands built are to `nodes`, and nothing here reads per-existing-node
state, so a join's cost does not grow with the cluster's size.

    next_step(join, sealed, now) -> RunLocally("ask") | Wait(reason) | Send(nodes: each its next phase)
                                    | RunLocally("label") | Succeed | Fail(reason)   (bke.core.operation)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from bke.contracts.membership import JoinNodes, MembershipNode, MembershipView
from bke.contracts.statuses import FinishedStatus, InputStatus, InstallStatus, JoinInputStatus
from bke.core.node_steps import component_ports
from bke.core.operation import (
    Answers, Decision, Fail, OperationRecord, OperationStatus, RunLocally, RunStatus, Send, ServiceAnswer, StepRun,
    Succeed, Wait, fold, in_flight,
)
from bke.core.operation.fold import STDERR_KEEP
from bke.core.plan import NodePlan, Plan
from bke.core.state.schema import record_kind

from ...command_ids import command_id
from ...phases import CONTROL_PLANE, PHASES, Phase
from ..membership.refusals import gates_refusal, nodes_refusal
from .agents import AGENTS_DEADLINE_S, agents_wait
from .etcd import EtcdJoinRecord, etcd_join_refusal

__all__ = [
    "AGENTS_DEADLINE_S",
    "Join",
    "JoinRun",
    "SLUG_PREFIX",
    "apply_result",
    "command_of",
    "fold_answers",
    "is_join_request",
    "join_refusal",
    "join_slug",
    "new_join",
    "next_step",
    "node_phases",
    "phases_of",
]

JOIN_VERSION = record_kind("join").current  # in the JSON: the join record's form (bke.core.state.schema)
SLUG_PREFIX = "join@"
InputState = JoinInputStatus
INPUTS = ("render", "certs")  # the services a join asks, by their answers' names


def join_slug(request_id: str) -> str:
    return SLUG_PREFIX + request_id



def is_join_request(request_id: str) -> bool:
    """The renderer's and certs service's answers to a join carry the join's slug as request id."""
    return request_id.startswith(SLUG_PREFIX)


def phases_of(plan: Plan, hosts: list[str]) -> dict[str, list[Phase]]:
    """The install's phases that send each of `hosts` a command, in install order (the PHASES
    table is the one source: a phase added there for workers is run by joins too). One pass over
    the plan per phase, whatever the number of hosts.

    An etcd-only node gets node-env, certs, etcd and health (no workers phase: it registers no
    Node). Its etcd phase writes the manifest, then waits for the member's /health while it is
    still a learner (the caller promotes it after the join), which a learner answers: in etcd
    v3.5 (v3.5.1, the lab's) /health on the metrics listener is checkV3Health
    (server/etcdserver/api/etcdhttp/metrics.go): no alarm, a known leader, then a linearizable
    Range called on the server directly, not through the gRPC interceptor that refuses a
    learner's RPCs (api/v3rpc/interceptor.go); its read index goes to the leader like any
    follower's (raft/raft.go stepFollower, MsgReadIndex), and a leader that is the only voter
    answers it too (stepLeader, IsSingleton). Checked on real etcd in
    tests/integration/test_dispatcher_etcd_join.py."""
    out: dict[str, list[Phase]] = {h: [] for h in hosts}
    for p in PHASES:
        if p.build is None or not p.run_if(plan):
            continue
        for t in p.targets(plan):
            if t.hostname in out:
                out[t.hostname].append(p)
    return out


def node_phases(plan: Plan, node: NodePlan) -> list[Phase]:
    return phases_of(plan, [node.hostname])[node.hostname]


@dataclass(kw_only=True)
class JoinRun(StepRun):
    phases: list[str]  # slugs, in order
    index: int = 0  # the phase it is in (== len(phases): every command done); `status` is of its command

    @property
    def stage(self) -> str:
        return self.phases[self.index] if self.index < len(self.phases) else "labels"


@dataclass(kw_only=True)
class Join(OperationRecord):
    KIND = "join"  # its form's version in the JSON (bke.core.state.schema)

    plan_digest: str
    nodes: list[JoinRun]
    asked: bool = False  # the renderer and certs service were asked
    render: InputState = InputState.PENDING
    certs: InputState = InputState.PENDING
    input_reason: str = ""
    labelled: bool = False
    waiting: str = ""
    finished_sent: bool = False
    # the etcd-only nodes' starts in their running etcd clusters (join form version 2)
    etcd_joins: list[EtcdJoinRecord] = field(default_factory=list)
    # when the join began to wait for its agents (ISO time; "" = not yet): the deadline's start
    # (join form version 3; an older record reads as "": the clock starts at the next pass)
    agents_since: str = ""
    # nodes joining again with more parts (JoinNodes.rejoin): the ports their running parts
    # hold, which their preflight does not count as taken (join form version 4; an older
    # record reads as none)
    held_ports: dict[str, list[int]] = field(default_factory=dict)

    @property
    def slug(self) -> str:
        return join_slug(self.request_id)

    def finish(self, status: OperationStatus, reason: str, at: str) -> None:
        super().finish(status, reason, at)
        self.waiting = ""

    def node_status(self, n: JoinRun) -> RunStatus:
        if n.status == RunStatus.FAILED:
            return RunStatus.FAILED
        if n.index >= len(n.phases):
            return RunStatus.SUCCEEDED if self.labelled else RunStatus.RUNNING
        return RunStatus.PENDING if n.index == 0 and n.status == RunStatus.PENDING else RunStatus.RUNNING

    def node_views(self) -> list[MembershipNode]:
        return [MembershipNode(hostname=n.hostname, status=self.node_status(n), stage=n.stage,
                               reason=f"step {n.step}: {n.stderr[:500]}" if n.status == RunStatus.FAILED else "")
                for n in self.nodes]

    def view(self) -> MembershipView:
        return MembershipView(request_id=self.request_id, status=self.status, started_at=self.started_at,
                              finished_at=self.finished_at, message=self.message, waiting=self.waiting,
                              nodes=self.node_views())

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> "Join":
        # version 1 (before etcd-only nodes joined) has no etcd joins: read as none
        return cls(**{**doc, "nodes": [JoinRun(**n) for n in doc["nodes"]],
                      "etcd_joins": [EtcdJoinRecord(**e) for e in doc.get("etcd_joins", [])]})


def join_refusal(req: JoinNodes, plan: Plan | None, stored_digest: str, install_status: str | None, *,
                 busy: str = "", paused: bool = False, current: Join | None = None) -> str:
    """Why this join may not start ("" if it may). `busy`: another operation of the cluster that
    runs (a rotation, reset, upgrade or removal), described."""
    c = req.cluster
    if plan is None:
        return f"cluster {c} has no plan: install it first"
    if stored_digest != req.plan_digest:
        return (f"planDigest: the stored plan of {c} is {stored_digest[:12]}, not {req.plan_digest[:12]}: "
                "swap in the plan that names the new nodes first (or it was replaced since)")
    by_name = {n.hostname: n for n in plan.nodes}
    why = nodes_refusal(req.nodes, by_name, c)
    if why:
        return why
    control_plane = sorted(h for h in req.nodes if _runs_control_plane(by_name[h]))
    if control_plane and not req.part_of:  # bke apply's run orders a control-plane scale-out around its join
        return (f"nodes: control-plane nodes (they join with a control-plane scale-out, not a join of workers "
                f"and etcd-only nodes): {', '.join(control_plane[:5])}")
    why = etcd_join_refusal(req, by_name) or rejoin_refusal(req, by_name)
    if why:
        return why
    install = ("" if install_status == InstallStatus.SUCCEEDED else
               f"the install of {c} has not succeeded ({install_status or 'none'}): workers join an installed cluster")
    return gates_refusal(c, req.request_id, paused=paused, install=install, busy=busy, verb="join", current=current)


def _runs_control_plane(node: NodePlan) -> bool:
    return any(c in node.components for c in CONTROL_PLANE) or any(r.startswith("master") for r in node.roles)


def new_join(req: JoinNodes, plan: Plan, now: str) -> Join:
    phases = phases_of(plan, list(req.nodes))
    runs = [JoinRun(hostname=h, phases=[p.slug for p in phases[h]]) for h in req.nodes]
    etcd = [EtcdJoinRecord(e.etcd_cluster, e.member, e.initial_cluster) for e in req.etcd_joins or []]
    held = {r.hostname: component_ports(plan, plan.node(r.hostname), list(r.running)) for r in req.rejoin or []}
    return Join(request_id=req.request_id, cluster=req.cluster, plan_digest=req.plan_digest, nodes=runs, started_at=now,
                etcd_joins=etcd, held_ports=held)


def rejoin_refusal(req: JoinNodes, by_name: dict[str, NodePlan]) -> str:
    """Why the request's rejoins do not fit ("" if they do): each names a node of the request,
    once, that runs in the stored plan everything it runs now (a join adds, never takes away)."""
    rejoin = req.rejoin or []
    hosts = [r.hostname for r in rejoin]
    outside = sorted(set(hosts) - set(req.nodes))
    if outside:
        return f"rejoin: not among the nodes of this join: {', '.join(outside[:5])}"
    if len(set(hosts)) != len(hosts):
        return "rejoin: a node is named twice"
    losing = sorted(f"{r.hostname} ({', '.join(sorted(set(r.running) - set(by_name[r.hostname].components)))})"
                    for r in rejoin if set(r.running) - set(by_name[r.hostname].components))
    if losing:
        return ("rejoin: these nodes would stop running parts, which a join does not take away: "
                + "; ".join(losing[:5]))
    return ""


def next_step(j: Join, sealed: frozenset[str], now: datetime,
              agents_deadline_s: float = AGENTS_DEADLINE_S) -> Decision:
    """`sealed`: the join's nodes whose bundle the certs service said is sealed to their agent;
    `now`: the caller's clock (the agents' deadline is measured from `j.agents_since`)."""
    # 1. a service that failed for this plan fails the join with its reason
    if j.render == InputState.FAILED or j.certs == InputState.FAILED:
        return Fail(j.input_reason or "an input failed")
    # 2. the renderer and the certs service are asked once (their answers carry our request id)
    if not j.asked:
        return RunLocally("ask")
    # 3. the files and the PKI for this plan first
    if j.render != InputState.READY or j.certs != InputState.READY:
        waiting = [n for n, s in (("rendered files", j.render), ("certificates", j.certs)) if s != InputState.READY]
        return Wait("waiting for the " + " and the ".join(waiting) + " of the new plan")
    # 4. every new node's bundle sealed to its provisioned agent (its agent registered), within the deadline
    unsealed = [n.hostname for n in j.nodes if n.hostname not in sealed]
    if unsealed:
        w = agents_wait(j.cluster, len(j.nodes), unsealed, j.agents_since, now, agents_deadline_s)
        return Fail(w.reason, tuple(unsealed)) if w.failed else Wait(w.reason, since=w.since)
    # 5. a failed node stops the join with its phase, step and output
    failed = next((n for n in j.nodes if n.status == RunStatus.FAILED), None)
    if failed is not None:
        return Fail(f"node {failed.hostname} phase {failed.stage} step {failed.step}: {failed.stderr[:500]}",
                    (failed.hostname,))
    # 6. each node whose last command is done goes on to its next phase, on its own
    ready = tuple(n.hostname for n in j.nodes if n.status == RunStatus.PENDING and n.index < len(n.phases))
    if ready:
        return Send(ready)
    if any(n.status == RunStatus.RUNNING for n in j.nodes):
        return Wait("commands in flight")
    # 7. every command done: the new nodes' labels and taints, then the end
    if not j.labelled:
        return RunLocally("label", tuple(n.hostname for n in j.nodes))
    return Succeed()


def apply_result(j: Join, cid: str, status: str, step: str, stderr: str) -> bool:
    """Record an agent's answer; False if it is not this join's command in flight (a duplicate,
    a stale result). A success moves the node to its next phase (Pending) or past the last."""
    node = in_flight(j.nodes, cid)
    if node is None:
        return False
    if status == FinishedStatus.SUCCEEDED:
        node.index += 1
        node.status = RunStatus.PENDING if node.index < len(node.phases) else RunStatus.SUCCEEDED
        node.step, node.stderr = "", ""
    else:
        node.status = RunStatus.FAILED
        node.step, node.stderr = step, stderr[-STDERR_KEEP:]
    return True


def fold_input(j: Join, name: str, answer: ServiceAnswer) -> bool:
    """Record a service's answer (render, certs) to this join; False if it is not one that
    changes it (an answer to an earlier join, or the same again). Ready for another plan than
    the join's (the stored plan changed meanwhile) fails it."""
    if answer.request_id != j.slug or name not in INPUTS or answer.status not in (InputStatus.READY, InputStatus.FAILED):
        return False
    status = InputState.READY if answer.status == InputStatus.READY else InputState.FAILED
    reason = answer.reason
    if status == InputState.READY and answer.digest and answer.digest != j.plan_digest:
        status = InputState.FAILED
        reason = f"{name}: the stored plan changed during the join ({answer.digest[:12]}, not {j.plan_digest[:12]})"
    if (j.render if name == "render" else j.certs) == status:
        return False
    if name == "render":
        j.render = status
    else:
        j.certs = status
    if status == InputState.FAILED:
        j.input_reason = reason
    return True


def fold_answers(j: Join, answers: Answers) -> bool:
    """The services' answers, then the agents'; whether the record changed."""
    changed = False
    for name, answer in answers.services.items():
        changed |= fold_input(j, name, answer)
    return fold(j, answers.commands, apply_result) | changed


def command_of(j: Join, run: JoinRun) -> str:
    """The fixed id of `run`'s command for its current phase."""
    return command_id(j.cluster, j.slug, run.hostname, run.index)
