"""Role semantics as data: which roles make a master, a registering node, an etcd member."""
from __future__ import annotations

__all__ = [
    "CONTROL_PLANE_ROLES",
    "ETCD_ROLES",
    "is_master",
    "is_worker",
    "registers",
]

# Optional roles that only refine which masters run a component (product decision).
CONTROL_PLANE_ROLES: dict[str, str] = {
    "apiserver": "kube-apiserver",
    "controller-manager": "kube-controller-manager",
    "scheduler": "kube-scheduler",
}
# Role -> etcd cluster it places a member of.
ETCD_ROLES: dict[str, str] = {"etcd": "etcd-data", "etcd-event": "etcd-events", "etcd-pod": "etcd-pods"}


def is_master(roles: list[str] | tuple[str, ...]) -> bool:
    return "master" in roles or "master/node" in roles


def is_worker(roles: list[str] | tuple[str, ...]) -> bool:
    """Runs workloads: `node`, `master/node`, or `master` together with `node`."""
    return "node" in roles or "master/node" in roles


def registers(roles: list[str] | tuple[str, ...]) -> bool:
    """Registers as a Kubernetes node. Etcd-only nodes run a standalone kubelet and do not."""
    return is_master(roles) or is_worker(roles)
