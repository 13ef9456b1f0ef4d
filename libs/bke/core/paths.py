"""Absolute file locations on a node, shared by certs, renderer, dispatcher and agent.

kubeadm's layout where kubeadm has one; the split etcd clusters get sibling folders.
"""
from __future__ import annotations

import fnmatch
from collections.abc import Iterable

__all__ = [
    "ADMIN_CONF",
    "CONTROLLER_MANAGER_CONF",
    "ETCD_CERT_DIRS",
    "KUBELET_CONF",
    "KUBELET_CONFIG",
    "KUBERNETES_DIR",
    "MANIFESTS_DIR",
    "PKI_DIR",
    "SCHEDULER_CONF",
    "SUPER_ADMIN_CONF",
    "first_match",
]

KUBERNETES_DIR = "/etc/kubernetes"
PKI_DIR = "/etc/kubernetes/pki"
MANIFESTS_DIR = "/etc/kubernetes/manifests"
ADMIN_CONF = "/etc/kubernetes/admin.conf"
SUPER_ADMIN_CONF = "/etc/kubernetes/super-admin.conf"
CONTROLLER_MANAGER_CONF = "/etc/kubernetes/controller-manager.conf"
SCHEDULER_CONF = "/etc/kubernetes/scheduler.conf"
KUBELET_CONF = "/etc/kubernetes/kubelet.conf"
KUBELET_CONFIG = "/var/lib/kubelet/config.yaml"
# etcd cluster name -> its certificate folder on a member node.
ETCD_CERT_DIRS = {
    "etcd-data": "/etc/kubernetes/pki/etcd",
    "etcd-events": "/etc/kubernetes/pki/etcd-events",
    "etcd-pods": "/etc/kubernetes/pki/etcd-pods",
}


def first_match(path: str, table: Iterable[tuple[str, str]], default: str) -> str:
    """The value of the first (glob, value) row whose glob matches the node path (`*` crosses
    `/`, case counts), else `default`: tables of path patterns are read first match wins."""
    return next((value for glob, value in table if fnmatch.fnmatchcase(path, glob)), default)
