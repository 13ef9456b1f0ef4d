"""Every step a run of the upgrade record can hold, by kind: the one vocabulary of the order tables
(bke.core.upgrade.order.ORDER, bke.core.lifecycle.apply_run.APPLY_STEPS), the run record
(bke.core.upgrade.run) and the upgrader's carriers (one row per kind: bke_upgrader.carriers).

A StrEnum: a kind is its name on the wire and in the record (`StepRun.name` stays a str, the same
JSON as before), and a stored name compares and hashes equal to its kind.
"""
from __future__ import annotations

from enum import StrEnum

__all__ = ["LOCAL_STEPS", "NODE_STEPS", "StepKind", "step_kind"]


class StepKind(StrEnum):
    # an upgrade's (ORDER), in its order
    PRE_CHECKS = "pre-checks"
    AGENTS = "agents"
    ETCD_SNAPSHOTS = "etcd-snapshots"
    CERTIFICATES = "certificates"
    ETCD = "etcd"
    KUBE_APISERVER = "kube-apiserver"
    KUBE_CONTROLLER_MANAGER = "kube-controller-manager"
    KUBE_SCHEDULER = "kube-scheduler"
    MASTERS_RUNTIME = "masters-runtime"
    WORKERS = "workers"
    ADDONS = "addons"
    POST_CHECKS = "post-checks"
    # a changed spec's own (bke.core.lifecycle.apply_run)
    DRAIN_NODES = "drain-nodes"
    ETCD_MEMBER_ADD = "etcd-member-add"
    ETCD_MEMBER_PROMOTE = "etcd-member-promote"
    ETCD_MEMBER_REMOVE = "etcd-member-remove"
    ETCD_HEALTH = "etcd-health"
    LOAD_BALANCER = "load-balancer"
    CLEANUP = "cleanup"
    DELETE_NODE_OBJECTS = "delete-node-objects"
    LABELS = "labels"
    REMOVE_NODES = "remove-nodes"
    JOIN_NODES = "join-nodes"


# Steps the upgrader runs itself (not through agents): the checks on live facts, the renewal
# asked of the certs service, the addons applied through the cluster's API, and (the run of a
# changed spec, bke.core.lifecycle.apply_run) the nodes' labels and taints set through the API,
# nodes whose kubelet stops registering cordoned and drained through it, then their Node objects
# deleted, and the workers removed and joined by a request to the dispatcher.
LOCAL_STEPS = frozenset({StepKind.PRE_CHECKS, StepKind.CERTIFICATES, StepKind.DRAIN_NODES, StepKind.ADDONS,
                         StepKind.LABELS, StepKind.DELETE_NODE_OBJECTS, StepKind.REMOVE_NODES, StepKind.JOIN_NODES})
# The others: commands to the agents of each batch's nodes.
NODE_STEPS = frozenset(StepKind) - LOCAL_STEPS


def step_kind(name: str) -> StepKind | None:
    """The kind of a step's stored name; None for a name this code does not know."""
    try:
        return StepKind(name)
    except ValueError:
        return None
