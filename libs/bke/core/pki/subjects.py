"""Certificate subjects that depend on the Kubernetes release, as data: kubeadm changes them.

The certificate table (bke.core.pki.table) gives each row's subject; a row that names a rule here
(``CertSpec.o_rule``) has the organisations (O, the RBAC groups) that kubeadm of the cluster's
Kubernetes release issues it with. Every place that decides a subject reads it through
:func:`subject_o`: the ensure step (a leaf whose subject no longer matches is re-issued), the
upgrade's renewal (bke.core.pki.expiry.renewal_instances, given the release the upgrade moves to) and
the bootstrap RBAC (bke.core.rbac grants the group-less certificate its rights by user name).

``apiserver-kubelet-client`` (kubernetes/kubernetes PR 138957, "kubeadm: use dedicated ClusterRole
for apiserver kubelet client", merged 2026-05-11 for v1.37): cmd/kubeadm/app/phases/certs/
certlist.go ``KubeadmCertKubeletClient`` no longer sets ``Organization:
[kubeadm:cluster-admins]`` (kubeadm.ClusterAdminsGroupAndClusterRoleBinding, in it since PR 121837,
v1.29), and cmd/kubeadm/app/phases/bootstraptoken/node/tlsbootstrap.go
``AllowAPIServerToAccessKubeletAPI`` binds the certificate's CN (``kube-apiserver-kubelet-client``,
constants.APIServerKubeletClientCertCommonName) to ``system:kubelet-api-admin`` instead; init and
`upgrade apply` create that binding. It was cherry-picked to every maintained branch the same day:
release-1.36 (PR 138958), release-1.35 (PR 138959), release-1.34 (PR 138960), release-1.33
(PR 138964). The first release of a branch carrying it, where read: v1.36.1 and v1.35.5
(clastix/kamaji#1207: "present in v1.35.3 and v1.36.0, and removed in v1.35.5 and v1.36.1+";
kubernetes/kubeadm#3310: `kubeadm upgrade apply v1.35.5` from 1.35.4 re-issued the certificate
without the group). The 1.33 and 1.34 patch releases carrying it could not be read here (the
release notes of those branches are not in the offline index): those minors keep the group in
every patch, which still works (BKE binds the group too) but holds more rights than kubeadm's.
Read from the pull requests and the issues above; the Go source of those releases could not be
fetched here (the repository is larger than this machine may copy).
"""
from __future__ import annotations

from dataclasses import dataclass

from bke.core.versions import parse_version

__all__ = ["RULES", "SubjectRule", "dropped", "subject_o"]


@dataclass(frozen=True)
class SubjectRule:
    """Organisations a row loses from a release on (the first release of each branch that has
    the change; a minor newer than every listed branch has it from its first release)."""

    drops: tuple[str, ...]
    first_release: tuple[str, ...]  # per release branch, oldest branch first
    source: str


RULES: dict[str, SubjectRule] = {
    "kubeadm-138957": SubjectRule(
        drops=("kubeadm:cluster-admins",),
        first_release=("1.35.5", "1.36.1", "1.37.0"),
        source="kubernetes/kubernetes#138957 (cherry-picks #138958 1.36, #138959 1.35)",
    ),
}


def _triple(version: str) -> tuple[int, int, int]:
    v = parse_version(version if version.count(".") >= 2 else f"{version}.0")
    return v.major, v.minor, v.patch


def dropped(rule: str, kubernetes: str) -> bool:
    """True when kubeadm of this Kubernetes release (``1.36.1``, ``v1.37.0``; a bare minor
    means its .0) issues the row without the rule's organisations."""
    r = RULES[rule]
    v = _triple(kubernetes)
    firsts = [_triple(f) for f in r.first_release]
    same_branch = [f for f in firsts if f[:2] == v[:2]]
    if same_branch:
        return v >= same_branch[0]
    return v[:2] > firsts[-1][:2]  # a newer minor than every listed branch: it has the change


def subject_o(o: tuple[str, ...], rule: str, kubernetes: str | None) -> tuple[str, ...]:
    """The organisations of a row with subject rule ``rule`` ("" for none) for this release;
    ``None``: the table's own (the release is not known, e.g. a renewal outside an upgrade)."""
    if not rule or kubernetes is None or not dropped(rule, kubernetes):
        return o
    gone = set(RULES[rule].drops)
    return tuple(g for g in o if g not in gone)
