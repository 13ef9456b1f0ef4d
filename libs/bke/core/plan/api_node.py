"""The node BKE reaches the cluster's API through (kubeadm's "init" node)."""
from __future__ import annotations

from .models import NodePlan, Plan

__all__ = ["init_node"]


def init_node(plan: Plan) -> NodePlan:
    """The endpoint's own node if it runs kube-apiserver, else the first apiserver node."""
    host = plan.control_plane_endpoint.rsplit(":", 1)[0].strip("[]")
    apiservers = plan.nodes_running("kube-apiserver")
    return next((n for n in apiservers if n.ip == host), apiservers[0])
