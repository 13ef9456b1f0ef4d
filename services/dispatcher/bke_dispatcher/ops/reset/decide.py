"""Reset and delete, the pure part: may a reset start, in which order do its nodes go, what does
one node's command hold, and what comes next. No Redis, no bus, no clock.

A reset (kubeadm's `reset`, for BKE's nodes) first takes a snapshot of every etcd cluster on a
member that is still there (kept sealed in BKE's object store, never on a node; a cluster whose
members were all reset before is skipped with that reason), then sends one `ResetNode` step to
each named node (all of them for a delete), a rank at a time: workers, then control-plane nodes,
then etcd members, so that etcd goes last. Within a rank the nodes go together (their resets are
independent). A failed snapshot or node stops the reset as Failed with the reason.

    next_step(reset) -> Send(etcd clusters, "snapshot") | Send(nodes) | Wait | Succeed | Fail(reason)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bke.contracts.agent_steps import ResetNode
from bke.contracts.reset import ResetCluster, ResetNodeView, ResetSnapshotView, ResetView
from bke.contracts.statuses import InstallStatus, OperationStatus
from bke.core.operation import (
    Answer, Decision, Fail, NodeProgress, OperationRecord, RunStatus, Send, StepRun, Succeed, Wait, failed_node,
    in_flight, settle_in_flight,
)
from bke.core.operation.fold import STDERR_KEEP
from bke.core.plan import NodePlan, Plan
from bke.core.plan.models import quorum

from ...command_ids import command_id

__all__ = [
    "NodeRun",
    "Reset",
    "SnapshotRun",
    "apply_result",
    "new_reset",
    "next_step",
    "node_rank",
    "refusal",
    "reset_order",
    "reset_slug",
    "reset_step",
]

SLUG_PREFIX = "reset@"


def reset_slug(request_id: str) -> str:
    return SLUG_PREFIX + request_id



@dataclass
class SnapshotRun:
    etcd_cluster: str
    node: str  # the member asked ("" when none is left)
    status: RunStatus = RunStatus.PENDING  # Skipped: no member left to ask
    command_id: str = ""
    snapshot_id: str = ""
    reason: str = ""

    def __post_init__(self) -> None:
        self.status = RunStatus(self.status)


@dataclass(kw_only=True)
class NodeRun(StepRun):
    rank: int  # 0 worker, 1 control plane, 2 etcd member: lower ranks go first
    etcd_data_dirs: list[str] = field(default_factory=list)


@dataclass(kw_only=True)
class Reset(OperationRecord, NodeProgress):
    KIND = "reset"  # its form's version in the JSON (bke.core.state.schema)

    delete: bool
    snapshots: list[SnapshotRun]
    nodes: list[NodeRun]
    # nodes reset by this or an earlier reset of the cluster: no snapshot is asked of them again
    reset_before: list[str] = field(default_factory=list)
    deleted_sent: bool = False  # a delete: ClusterDeleted published

    def view(self) -> ResetView:
        return ResetView(
            request_id=self.request_id, status=self.status, delete=self.delete, done=self.done, total=len(self.nodes),
            started_at=self.started_at, finished_at=self.finished_at, message=self.message,
            snapshots=[ResetSnapshotView(etcd_cluster=s.etcd_cluster, status=s.status, node=s.node,
                                         snapshot_id=s.snapshot_id, reason=s.reason) for s in self.snapshots],
            nodes=[ResetNodeView(hostname=n.hostname, status=n.status) for n in self.nodes],
        )

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> "Reset":
        return cls(**{**doc, "snapshots": [SnapshotRun(**x) for x in doc["snapshots"]],
                      "nodes": [NodeRun(**n) for n in doc["nodes"]]})


def refusal(req: ResetCluster, plan: Plan | None, install_status: str | None, *, paused: bool = False,
            current: Reset | None = None) -> str:
    """Why this reset may not start now ("" if it may): known nodes, a cluster not paused. Another
    operation of the cluster (an install, upgrade, restore, rotation) is refused after this, by
    the cluster's operation slot (bke.adapters.state.operation_slot); the install and reset records' own
    checks stay for one left Running without a claim (written before the slot existed)."""
    c = req.cluster
    if plan is None:
        return f"cluster {c} has no plan: nothing to reset"
    if req.delete and req.nodes:
        return "nodes: a delete resets every node; name nodes with a reset, not a delete"
    unknown = sorted(set(req.nodes) - {n.hostname for n in plan.nodes})
    if unknown:
        return f"nodes: not in the plan of {c}: {', '.join(unknown[:5])}"
    why = _quorum_refusal(req, plan, current.reset_before if current is not None else [])
    if why:
        return why
    if paused:
        return f"{c} is paused: resume it first (bke resume {c})"
    if install_status == InstallStatus.RUNNING:
        return f"the install of {c} is running: reset it after it ends (or fails)"
    if current is not None and current.status == OperationStatus.RUNNING and current.request_id != req.request_id:
        return f"reset {current.request_id} of {c} is still running ({current.done}/{len(current.nodes)} nodes)"
    return ""


def _quorum_refusal(req: ResetCluster, plan: Plan, reset_before: list[str]) -> str:
    """A reset of some, not all, of an etcd cluster's members that are left may not take it below
    its quorum: the members it resets stop and lose their data but stay listed (a reset does not
    remove them from their cluster; `bke apply` without them does, quorum checked). Members
    reset before count as gone. Resetting every member left (or the cluster) is fine."""
    named, gone = set(req.nodes), set(reset_before)
    if not named:
        return ""
    for ec in plan.etcd_clusters:
        members = [m.hostname for m in ec.members]
        alive = [h for h in members if h not in gone]
        taken = [h for h in alive if h in named]
        left, need = len(alive) - len(taken), quorum(len(members))
        if taken and left and left < need:
            return (f"nodes: resetting {', '.join(taken)} would leave {ec.name} {left} working member(s) of "
                    f"{len(members)}, below its quorum of {need}: reset every member left ({', '.join(alive)}) or "
                    f"the whole cluster, or take members out of {ec.name} first (`bke apply` without them)")
    return ""


def node_rank(plan: Plan, node: NodePlan) -> int:
    """0 a worker, 1 a control-plane node without etcd, 2 an etcd member (they go last)."""
    if any(ec.member(node.hostname) is not None for ec in plan.etcd_clusters):
        return 2
    return 1 if any(r.startswith("master") for r in node.roles) else 0  # "master", "master/node"


def reset_order(plan: Plan, hosts: set[str]) -> list[str]:
    """Workers first, then control-plane nodes, then etcd members; plan order within a rank."""
    rank = {n.hostname: node_rank(plan, n) for n in plan.nodes}
    return sorted((n.hostname for n in plan.nodes if n.hostname in hosts), key=lambda h: rank[h])


def new_reset(req: ResetCluster, plan: Plan, now: str, reset_before: list[str]) -> Reset:
    hosts = set(req.nodes) if req.nodes else {n.hostname for n in plan.nodes}
    slug = reset_slug(req.request_id)
    by_name = {n.hostname: n for n in plan.nodes}
    runs = []
    for h in reset_order(plan, hosts):
        dirs = [ec.data_dir for ec in plan.etcd_clusters if ec.member(h) is not None]
        runs.append(NodeRun(hostname=h, rank=node_rank(plan, by_name[h]), etcd_data_dirs=dirs,
                            command_id=command_id(req.cluster, slug, h, 0)))
    gone = set(reset_before)
    snaps = []
    for i, ec in enumerate(plan.etcd_clusters):
        member = next((m.hostname for m in ec.members if m.hostname not in gone), "")
        if member:
            snaps.append(SnapshotRun(ec.name, member, command_id=command_id(req.cluster, slug, member, 1 + i)))
        else:
            snaps.append(SnapshotRun(ec.name, "", status=RunStatus.SKIPPED,
                                     reason="no member left to ask: every member was reset before"))
    return Reset(request_id=req.request_id, cluster=req.cluster, delete=req.delete, snapshots=snaps, nodes=runs,
                 started_at=now, reset_before=sorted(gone))


def next_step(r: Reset) -> Decision:
    # 1. a failed snapshot stops the reset before any node is touched
    bad = next((s for s in r.snapshots if s.status == RunStatus.FAILED), None)
    if bad is not None:
        return Fail(f"snapshot of {bad.etcd_cluster} on {bad.node} failed: {bad.reason[:500]}")
    # 2. every snapshot first, all at once (each is one member of its own etcd cluster)
    pending = tuple(s.etcd_cluster for s in r.snapshots if s.status == RunStatus.PENDING)
    if pending:
        return Send(pending, "snapshot")
    if any(s.status == RunStatus.RUNNING for s in r.snapshots):
        return Wait("waiting for the etcd snapshots")
    # 3. a failed node stops the reset, with its step and output as the reason
    failed = failed_node(r.nodes)
    if failed is not None:
        return failed
    # 4. a rank at a time: wait for the nodes in flight
    if any(n.status == RunStatus.RUNNING for n in r.nodes):
        return Wait("waiting for the nodes in flight")
    # 5. the next rank's nodes, or done
    left = [n for n in r.nodes if n.status == RunStatus.PENDING]
    if left:
        rank = min(n.rank for n in left)
        return Send(tuple(n.hostname for n in left if n.rank == rank))
    return Succeed()


def apply_result(r: Reset, cid: str, status: str, step: str, stderr: str) -> bool:
    """Record an answer; False if it is not one of this reset's commands in flight (a duplicate,
    or a stale result)."""
    answer = Answer(status, step, stderr)
    snap = in_flight(r.snapshots, cid)
    if snap is not None:
        snap.status = RunStatus.SUCCEEDED if answer.succeeded else RunStatus.FAILED
        snap.reason = "" if answer.succeeded else f"step {step}: {stderr[-STDERR_KEEP:]}"
        return True
    node = settle_in_flight(r.nodes, cid, answer)
    if node is None:
        return False
    if answer.succeeded and node.hostname not in r.reset_before:
        r.reset_before = sorted({*r.reset_before, node.hostname})
    return True


def reset_step(run: NodeRun, delete: bool) -> ResetNode:
    """The node's one step: what it holds of BKE's goes, its members' data too."""
    return ResetNode(id="reset-node", etcd_data_dirs=run.etcd_data_dirs, binaries=delete)
