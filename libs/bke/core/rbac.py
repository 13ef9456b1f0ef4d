"""Bootstrap RBAC, as kubeadm creates it at init, per Kubernetes minor: one data table.

Why: the identities BKE issues (bke.core.pki.table) carry groups and names that only mean something
once a binding grants them rights. kubeadm creates those bindings during `kubeadm init`; BKE
does not run kubeadm, so the addons phase applies the same bindings first, before anything that
uses admin.conf (the other addons, the health probe, `kubectl logs/exec` through the apiserver).

Sources (kubernetes/kubernetes, per release branch, and the Cluster API code that mirrors what
`kubeadm upgrade` adds, which names the release each binding started in):

* ``kubeadm:cluster-admins`` -> ClusterRole ``cluster-admin``, subject Group
  ``kubeadm:cluster-admins``: cmd/kubeadm/app/constants/constants.go
  (``ClusterAdminsGroupAndClusterRoleBinding``), created by cmd/kubeadm/app/phases/kubeconfig
  (``EnsureAdminClusterRoleBinding``, with super-admin.conf) since v1.29 (kubernetes#121305). Our
  admin.conf and, before the releases below, the apiserver's kubelet client certificate are in that group.
* ``kubeadm:apiserver-kubelet-client`` -> ClusterRole ``system:kubelet-api-admin``, subject User
  ``kube-apiserver-kubelet-client`` (that certificate's CN): added by kubernetes#138957 ("kubeadm:
  use dedicated ClusterRole for apiserver kubelet client", phases/bootstraptoken/node
  ``AllowAPIServerToAccessKubeletAPI``) together with dropping the certificate's group, in v1.37
  and, cherry-picked, v1.36.1 and v1.35.5: exactly the releases whose certificate has no group
  (the same rule, bke.core.pki.subjects, decides both), as
  kubernetes-sigs/cluster-api controlplane/kubeadm/internal/workload_cluster_rbac.go
  (``KubeletAPIAdminClusterRoleBindingName``, ``EnsureKubeadmPermissions``) records it.
  ``system:kubelet-api-admin`` itself is a bootstrap ClusterRole the apiserver creates
  (kubernetes#57128, plugin/pkg/auth/authorizer/rbac/bootstrappolicy).

Deliberately left out, and why:

* The bootstrap-token bindings (``kubeadm:kubelet-bootstrap``, ``kubeadm:get-nodes``,
  ``kubeadm:node-autoapprove-bootstrap``; phases/bootstraptoken/node/tlsbootstrap.go) and the
  ``cluster-info`` ConfigMap in kube-public (phases/bootstraptoken/clusterinfo): BKE hands every
  node its own kubelet.conf through its sealed certificate bundle; no node ever joins with a
  bootstrap token, so nothing may post a bootstrap CSR or read cluster-info anonymously.
* ``kubeadm:node-autoapprove-certificate-rotation`` (selfnodeclient auto-approval): BKE issues
  and rotates kubelet client certificates itself (`bke certs renew`, delivered sealed), so no
  kubelet CSR needs approving; granting it would let any node renew itself outside BKE's record.
* The kubeadm-config / kubelet-config ConfigMaps and their Roles: only `kubeadm join/upgrade`
  read them.

The other identities need no binding of ours: the controller-manager and scheduler
(``system:kube-controller-manager``, ``system:kube-scheduler``) and kubelets (``system:node:*``
under the Node authorizer) are covered by the apiserver's own bootstrap policy; super-admin.conf
is in ``system:masters``, which bypasses RBAC; the etcd clients never talk to the apiserver.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from bke.core.pki.subjects import dropped
from bke.core.versions import KUBERNETES, parse_version

__all__ = ["BINDINGS", "Binding", "CLUSTER_ADMINS", "bindings_for", "rbac_objects"]

CLUSTER_ADMINS = "kubeadm:cluster-admins"
_RBAC = "rbac.authorization.k8s.io"


@dataclass(frozen=True)
class Binding:
    name: str  # the ClusterRoleBinding, named as kubeadm names it
    role: str  # the ClusterRole it grants
    subject_kind: Literal["Group", "User"]
    subject: str
    since: str  # the first minor whose kubeadm creates it
    why: str
    rule: str = ""  # a bke.core.pki.subjects rule: created exactly by the releases that rule applies to


BINDINGS: tuple[Binding, ...] = (
    Binding(CLUSTER_ADMINS, "cluster-admin", "Group", CLUSTER_ADMINS, "1.29",
            "admin.conf (and the apiserver's kubelet client before 1.35.5/1.36.1/1.37) are issued in this group"),
    Binding("kubeadm:apiserver-kubelet-client", "system:kubelet-api-admin", "User", "kube-apiserver-kubelet-client",
            "1.35", "the apiserver's kubelet client (logs, exec, port-forward) by its CN, least privilege",
            rule="kubeadm-138957"),
)


def _minor(version_or_minor: str) -> tuple[int, int]:
    v = parse_version(version_or_minor if version_or_minor.count(".") >= 2 else f"{version_or_minor}.0")
    return v.major, v.minor


def bindings_for(kubernetes: str) -> tuple[Binding, ...]:
    """The bindings kubeadm of this Kubernetes version (or minor, "1.37", meaning its .0)
    creates at init."""
    target = _minor(kubernetes)
    if f"{target[0]}.{target[1]}" not in KUBERNETES:
        raise ValueError(f"Kubernetes {kubernetes} is not in the supported versions table")
    return tuple(b for b in BINDINGS if _minor(b.since) <= target and (not b.rule or dropped(b.rule, kubernetes)))


def rbac_objects(kubernetes: str) -> list[dict[str, Any]]:
    """The ClusterRoleBindings, as API objects (applied server-side, so re-applying is a no-op)."""
    return [
        {
            "apiVersion": f"{_RBAC}/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": b.name, "labels": {"app.kubernetes.io/managed-by": "bke"}},
            "roleRef": {"apiGroup": _RBAC, "kind": "ClusterRole", "name": b.role},
            "subjects": [{"apiGroup": _RBAC, "kind": b.subject_kind, "name": b.subject}],
        }
        for b in bindings_for(kubernetes)
    ]
