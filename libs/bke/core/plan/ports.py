"""The TCP ports each node's components listen on, as a table the plan decides.

The dispatcher's preflight (`ports-free`) and the lab's preflight (`bke.lab.preflight`) both need
it; tests/badinput/test_lab_preflight.py holds the dispatcher's copy to the same answer.
"""
from __future__ import annotations

from .models import NodePlan, Plan

__all__ = ["FIXED_PORTS", "node_ports"]

# Component -> port, as kubeadm's defaults (kubelet's API, the control plane's secure ports).
FIXED_PORTS: tuple[tuple[str, int], ...] = (
    ("kubelet", 10250),
    ("kube-apiserver", 6443),
    ("kube-controller-manager", 10257),
    ("kube-scheduler", 10259),
)


def node_ports(plan: Plan, node: NodePlan) -> dict[int, str]:
    """port -> what listens there ("etcd-data client", "kube-apiserver"), sorted by port."""
    out: dict[int, str] = {10250: "kubelet"}
    for c in plan.etcd_clusters:
        if c.name in node.components:
            out.update({c.client_port: f"{c.name} client", c.peer_port: f"{c.name} peer", c.metrics_port: f"{c.name} metrics"})
    for comp, port in FIXED_PORTS:
        if comp in node.components:
            out[port] = comp
    return dict(sorted(out.items()))
