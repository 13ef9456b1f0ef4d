"""Removing workers from a running cluster, the pure part: may a removal start, what stage each
node is in, and what comes next. No Redis, no bus, no clock.

What kubeadm's documentation asks to remove a node ("Remove the node": `kubectl drain
--delete-emptydir-data --force --ignore-daemonsets`, then `kubeadm reset` on the node, then
`kubectl delete node`), for BKE's workers, every node of the request together, stage by stage:

    drain        cordon, then evict its pods (PodDisruptionBudgets honoured; bke.adapters.drain)
    delete-node  its Node object deleted, so the scheduler and controllers forget it
    reset        the `ResetNode` step (bke_agent.reset: kubeadm reset's cleanup-node, and the
                 binaries and units BKE placed: the node leaves BKE)
    forget       the dispatcher's records of the node (its accepted agent, sealed mark,
                 heartbeats, per-phase commands, labels, health) removed
    done

(The Node is deleted before the reset rather than after, unlike kubeadm's page: a reset node's
kubelet is gone and cannot register the Node again; either order ends the same.) A stage that
fails stops the removal as Failed with the reason; the nodes stay in the stage they reached
(a cordoned, drained node is not uncordoned: it is on its way out). Only the removed nodes
receive a command. Etcd members and control-plane nodes are refused by name: removing them is
a control-plane scale-in (etcd membership first), another operation.

    next_step(removal) -> RunLocally(drain | delete-node | forget, nodes) | Send(nodes, "reset") | Wait
                          | Succeed | Fail(reason, node)   (bke.core.operation)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from bke.contracts.drain import DrainOptions
from bke.contracts.membership import MembershipNode, MembershipView, RemoveNodes
from bke.contracts.statuses import FinishedStatus, InstallStatus
from bke.core.operation import (
    Decision, Fail, NodeRun, OperationRecord, RunLocally, RunStatus, Send, Succeed, Wait, in_flight,
)
from bke.core.operation.fold import STDERR_KEEP
from bke.core.plan import NodePlan, Plan

from ...command_ids import command_id
from ..membership.refusals import gates_refusal, nodes_refusal
from ...phases import CONTROL_PLANE, ETCD

__all__ = [
    "REMOVAL_SLUG_PREFIX",
    "Removal",
    "RemovalRun",
    "STAGES",
    "advance",
    "apply_result",
    "fail_stage",
    "new_removal",
    "next_step",
    "removal_refusal",
    "removal_slug",
]

REMOVAL_SLUG_PREFIX = "remove@"
Stage = Literal["drain", "delete-node", "reset", "forget", "done"]
STAGES: tuple[Stage, ...] = ("drain", "delete-node", "reset", "forget", "done")
LOCAL_STAGES = ("drain", "delete-node", "forget")  # the dispatcher's own; "reset" is a command to the node


DRAIN_EXTRA = "drain"  # Removal.extra: the request's DrainOptions as JSON


def removal_slug(request_id: str) -> str:
    return REMOVAL_SLUG_PREFIX + request_id



@dataclass(kw_only=True)
class RemovalRun(NodeRun):
    stage: Stage = "drain"  # `status` is within the stage (Pending, Running, Failed); `command_id` the reset's
    reason: str = ""


@dataclass(kw_only=True)
class Removal(OperationRecord):
    KIND = "removal"  # its form's version in the JSON (bke.core.state.schema)

    nodes: list[RemovalRun]
    identities: list[str]  # the agents' bus identities, revoked by the authority's holder
    finished_sent: bool = False
    extra: dict[str, str] = field(default_factory=dict)  # room for later fields without a new form

    @property
    def slug(self) -> str:
        return removal_slug(self.request_id)

    def node_views(self) -> list[MembershipNode]:
        def status(n: RemovalRun) -> RunStatus:
            if n.status == RunStatus.FAILED:
                return RunStatus.FAILED
            if n.stage == "done":
                return RunStatus.SUCCEEDED
            return RunStatus.PENDING if n.stage == "drain" and n.status == RunStatus.PENDING else RunStatus.RUNNING

        return [MembershipNode(hostname=n.hostname, status=status(n), stage=n.stage, reason=n.reason) for n in self.nodes]

    def view(self) -> MembershipView:
        return MembershipView(request_id=self.request_id, status=self.status, started_at=self.started_at,
                              finished_at=self.finished_at, message=self.message, nodes=self.node_views())

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> "Removal":
        return cls(**{**doc, "nodes": [RemovalRun(**n) for n in doc["nodes"]]})


def _not_a_worker(plan: Plan, node: NodePlan, by_apply: bool = False) -> str:
    """Why `node` is not a plain worker ("" if it is, or if `by_apply`: bke apply's run, `partOf`,
    has taken the node's etcd members out of their clusters and ordered the control plane's
    scale-in around this removal, so the node is reset like a worker)."""
    if by_apply:
        return ""
    etcd = [ec.name for ec in plan.etcd_clusters if ec.member(node.hostname) is not None]
    if etcd or any(c in node.components for c in ETCD):
        return f"{node.hostname} (etcd member of {', '.join(etcd) or 'etcd'})"
    if any(c in node.components for c in CONTROL_PLANE) or any(r.startswith("master") for r in node.roles):
        return f"{node.hostname} (control plane)"
    return ""


def removal_refusal(req: RemoveNodes, plan: Plan | None, install_status: str | None, *, busy: str = "",
                    paused: bool = False, current: "Removal | None" = None) -> str:
    """Why this removal may not start ("" if it may). The stored plan must still name the nodes."""
    c = req.cluster
    if plan is None:
        return f"cluster {c} has no plan: nothing to remove"
    by_name = {n.hostname: n for n in plan.nodes}
    why = nodes_refusal(req.nodes, by_name, c, " (remove nodes before swapping in the plan without them)")
    if why:
        return why
    refused = [why for h in req.nodes if (why := _not_a_worker(plan, by_name[h], by_apply=bool(req.part_of)))]
    if refused:
        return ("nodes: only workers are removed this way; etcd members and control-plane nodes leave by a "
                f"control-plane scale-in: {', '.join(refused[:5])}")
    install = f"the install of {c} is running: remove nodes after it ends" if install_status == InstallStatus.RUNNING else ""
    return gates_refusal(c, req.request_id, paused=paused, install=install, busy=busy, verb="remove nodes",
                         current=current)


def new_removal(req: RemoveNodes, now: str, identities: list[str]) -> Removal:
    runs = [RemovalRun(hostname=h, command_id=command_id(req.cluster, removal_slug(req.request_id), h, 0)) for h in req.nodes]
    # the drain's options, kept only when the request named them (a record without keeps its form)
    extra = {DRAIN_EXTRA: req.drain.model_dump_json(by_alias=True)} if req.drain is not None else {}
    return Removal(request_id=req.request_id, cluster=req.cluster, nodes=runs, identities=identities, started_at=now,
                   extra=extra)


def drain_options(r: Removal) -> DrainOptions:
    """What the removal's drain may evict beyond kubectl's defaults (as its request said)."""
    raw = r.extra.get(DRAIN_EXTRA)
    return DrainOptions.model_validate_json(raw) if raw else DrainOptions()


def next_step(r: Removal) -> Decision:
    # 1. a failed stage stops the removal with its node and reason
    failed = next((n for n in r.nodes if n.status == RunStatus.FAILED), None)
    if failed is not None:
        return Fail(f"node {failed.hostname} {failed.stage}: {failed.reason[:500]}", (failed.hostname,))
    # 2. resets in flight are waited for
    if any(n.status == RunStatus.RUNNING for n in r.nodes):
        return Wait("resets in flight")
    # 3. the earliest stage any node is in, for every node in it
    left = [n for n in r.nodes if n.stage != "done"]
    if not left:
        return Succeed()
    stage = min((n.stage for n in left), key=STAGES.index)
    nodes = tuple(n.hostname for n in left if n.stage == stage)
    return RunLocally(stage, nodes) if stage in LOCAL_STAGES else Send(nodes, stage)


def advance(r: Removal, hosts: tuple[str, ...] | list[str]) -> None:
    """These nodes finished their stage: on to the next."""
    for n in r.nodes:
        if n.hostname in hosts and n.stage != "done":
            n.stage = STAGES[STAGES.index(n.stage) + 1]
            n.status, n.reason = RunStatus.PENDING, ""


def fail_stage(r: Removal, hosts: tuple[str, ...] | list[str], reason: str) -> None:
    for n in r.nodes:
        if n.hostname in hosts:
            n.status, n.reason = RunStatus.FAILED, reason[:STDERR_KEEP]


def apply_result(r: Removal, cid: str, status: str, step: str, stderr: str) -> bool:
    """Record a reset's answer; False if it is not this removal's reset in flight."""
    node = in_flight(r.nodes, cid)
    if node is None or node.stage != "reset":
        return False
    if status == FinishedStatus.SUCCEEDED:
        advance(r, [node.hostname])
    else:
        node.status, node.reason = RunStatus.FAILED, f"step {step}: {stderr[-STDERR_KEEP:]}"
    return True
