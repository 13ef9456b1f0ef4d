"""Certificate rotation, the pure part: may a rotation start, in which order do its nodes go,
what does one node's command hold, and what comes next. No Redis, no bus, no clock.

A rotation delivers the files of one renewal (`CertsRenewed`) to exactly the nodes that hold
them, one node at a time: etcd members first, member by member, etcd cluster by etcd cluster
(a member whose files are wrong then stops only itself, and quorum holds), then the other
nodes. Each node's command writes its renewed files, does what the reload table
(`reload.RELOADS`) says each needs to take effect, and waits the node's components healthy;
only then does the next node get its command. A failed node stops the rotation as Failed with
its step and stderr as the reason.

    next_step(rotation) -> Send(node) | Wait | Succeed | Fail(reason, node)   (bke.core.operation)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bke.contracts.agent_steps import RestartStaticPod, Step, SystemdUnit, WaitHealth
from bke.contracts.certs import CertsRenewed
from bke.contracts.rotation import RotationNode, RotationView
from bke.contracts.statuses import InstallStatus, OperationStatus
from bke.core.operation import (
    Answer, Decision, NodeProgress, OperationRecord, RunStatus, Send, StepRun, Succeed, Wait, failed_node,
    settle_in_flight,
)
from bke.core.pki import node_file_refs
from bke.core.plan import NodePlan, Plan
from bke.core.state.nodefiles import NodeFile

from ...command_ids import command_id
from ...phases import CONTROL_PLANE, ETCD, HEALTH_TIMEOUT_S
from ...reload import reload_for
from bke.core.node_steps import health_steps, write_steps

__all__ = [
    "NodeRun",
    "Rotation",
    "apply_result",
    "new_rotation",
    "next_step",
    "node_steps",
    "refusal",
    "rotation_order",
    "rotation_slug",
]

SLUG_PREFIX = "rotate@"
MANIFESTS = "/etc/kubernetes/manifests"


def rotation_slug(request_id: str) -> str:
    return SLUG_PREFIX + request_id



@dataclass(kw_only=True)
class NodeRun(StepRun):
    certs: list[str]  # certificate row names whose files this node holds
    instances: list[str]  # their renewed instance ids


@dataclass(kw_only=True)
class Rotation(OperationRecord, NodeProgress):
    KIND = "rotation"  # its form's version in the JSON (bke.core.state.schema)

    certificates: list[str]  # renewed instance ids
    nodes: list[NodeRun]
    origin: str = "cli"

    def view(self) -> RotationView:
        return RotationView(
            request_id=self.request_id, status=self.status, certificates=self.certificates, done=self.done,
            total=len(self.nodes), started_at=self.started_at, finished_at=self.finished_at, message=self.message,
            nodes=[RotationNode(hostname=n.hostname, status=n.status) for n in self.nodes],
        )

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> "Rotation":
        return cls(**{**doc, "nodes": [NodeRun(**n) for n in doc["nodes"]]})


def refusal(cluster: str, install_status: str | None, current: Rotation | None) -> str:
    """Why a new rotation may not start now ("" if it may). Another operation of the cluster
    (an upgrade, a reset, a restore) is refused before this, by the cluster's operation slot
    (bke.adapters.state.operation_slot); the rotation record's own check stays for a rotation left
    Running without a claim (written before the slot existed)."""
    if install_status != InstallStatus.SUCCEEDED:
        state = install_status or "not started"
        return f"the install of {cluster} is {state}: certificates are rotated only on an installed cluster"
    if current is not None and current.status == OperationStatus.RUNNING:
        return f"rotation {current.request_id} of {cluster} is still running ({current.done}/{len(current.nodes)} nodes)"
    return ""


def rotation_order(plan: Plan, hosts: set[str]) -> list[str]:
    """Etcd members first, member by member, etcd cluster by etcd cluster; then the rest, in
    plan order."""
    order: dict[str, None] = {}
    for c in plan.etcd_clusters:
        for n in plan.nodes:
            if c.name in n.components and n.hostname in hosts:
                order.setdefault(n.hostname)
    for n in plan.nodes:
        if n.hostname in hosts:
            order.setdefault(n.hostname)
    return list(order)


def new_rotation(ev: CertsRenewed, plan: Plan, now: str) -> Rotation:
    hosts = {h for c in ev.certificates for h in c.nodes}
    unknown = sorted(hosts - {n.hostname for n in plan.nodes})
    if unknown:
        raise ValueError(f"renewed certificates name nodes that are not in the plan: {', '.join(unknown[:5])}")
    runs = []
    for h in rotation_order(plan, hosts):
        mine = [c for c in ev.certificates if h in c.nodes]
        runs.append(NodeRun(hostname=h, certs=sorted({c.name for c in mine}), instances=[c.instance for c in mine],
                            command_id=command_id(ev.cluster, rotation_slug(ev.request_id), h, 0)))
    return Rotation(request_id=ev.request_id, cluster=ev.cluster, certificates=[c.instance for c in ev.certificates],
                    nodes=runs, started_at=now, origin=ev.origin)


def next_step(rot: Rotation) -> Decision:
    # 1. a failed node stops the rotation, with its step and output as the reason
    failed = failed_node(rot.nodes)
    if failed is not None:
        return failed
    # 2. one node at a time: wait for the node in flight
    running = next((n for n in rot.nodes if n.status == RunStatus.RUNNING), None)
    if running is not None:
        return Wait(f"waiting for {running.hostname}")
    # 3. the next node in order, or done
    pending = next((n for n in rot.nodes if n.status == RunStatus.PENDING), None)
    if pending is not None:
        return Send((pending.hostname,))
    return Succeed()


def apply_result(rot: Rotation, cid: str, status: str, step: str, stderr: str) -> bool:
    """Record a node's result; False if it is not this rotation's command in flight (a
    duplicate, or a stale result)."""
    return settle_in_flight(rot.nodes, cid, Answer(status, step, stderr)) is not None


def _health_url(plan: Plan, node: NodePlan, component: str) -> str | None:
    return next((s.url for s in health_steps(plan, node, (component,), 1.0) if isinstance(s, WaitHealth)), None)


def node_steps(plan: Plan, node: NodePlan, run: NodeRun, files: list[NodeFile]) -> list[Step]:
    """Write the node's renewed files (and only those), make them take effect, wait healthy."""
    renewed = set(run.instances)
    paths = {r.path for r in node_file_refs(plan, [node.hostname])[node.hostname] if r.instance in renewed}
    missing = paths - {f.path for f in files}
    if missing:
        raise ValueError(f"node {node.hostname}: no sealed file for {sorted(missing)[0]}")
    steps: list[Step] = list(write_steps([f for f in files if f.path in paths], "certs", "rotate"))
    done: set[str] = set()
    for cert in run.certs:
        row = reload_for(cert)
        if row.action == "none" or row.target in done:
            continue
        done.add(row.target)
        if row.action == "restart-pod" and row.target in node.components:
            steps.append(RestartStaticPod(id=f"restart:{row.target}", manifest=f"{MANIFESTS}/{row.target}.yaml",
                                          health_url=_health_url(plan, node, row.target), timeout_s=120.0))
        elif row.action == "restart-kubelet":
            steps.append(SystemdUnit(id="systemd:kubelet", unit="kubelet.service", action="restart"))
    components = tuple(c for c in (*ETCD, *CONTROL_PLANE) if c in node.components)
    steps += health_steps(plan, node, components, HEALTH_TIMEOUT_S)
    return steps

