"""Which certificates each static pod reads, and a digest of the names they carry.

A static pod reads its certificates once, when it starts; the kubelet restarts it only when its
manifest changes (the pod's hash is its file's, `kubernetes.io/config.hash`). So a certificate
re-issued with new names (an `apiServer.certSANs` entry added to a running cluster) would sit on
disk unused by the pod until something else restarts it: `kubeadm certs renew` leaves that
restart to the operator ("you must restart the control plane components"). Here every static
pod's manifest carries `names_digest` of its certificates as an annotation: a change of names
changes the manifest, so `bke apply` rolls that pod, node by node with the upgrader's rollback,
and the new certificate rides in the same `ReplaceFiles` (bke.core.upgrade.certificates).

The rows per pod are kubeadm's `renewCertsByComponent` (see bke.core.upgrade.certificates); keys are
placed at the node's own names only, so the digest is per node. Serials, keys and expiry dates
are left out on purpose: a renewal alone (same names) does not restart anything.
"""
from __future__ import annotations

import hashlib
import json

from bke.core.plan import Plan
from .instances import desired_instances

__all__ = ["POD_CERTS", "NAMES_ANNOTATION", "names_digest", "names_digests", "pod_of", "pod_rows"]

NAMES_ANNOTATION = "bke.bocloud.com/certificate-names"

# static pod -> the certificate rows it reads ({group}: the pod's etcd cluster)
POD_CERTS: dict[str, tuple[str, ...]] = {
    "etcd": ("{group}-server", "{group}-peer", "{group}-healthcheck-client"),
    "kube-apiserver": ("apiserver", "apiserver-kubelet-client", "front-proxy-client", "apiserver-etcd-client"),
    "kube-controller-manager": ("controller-manager.conf",),
    "kube-scheduler": ("scheduler.conf",),
}


def pod_rows(pod: str, group: str = "") -> tuple[str, ...]:
    """The certificate rows static pod `pod` (of etcd cluster `group`) reads; () for none."""
    return tuple(r.format(group=group) for r in POD_CERTS.get(pod, ()))


def names_digests(plan: Plan, hostname: str) -> dict[tuple[str, str], str]:
    """(static pod, etcd cluster or "") -> a short digest of the names (subject, SANs, kubeconfig
    server) of the certificates that pod reads on `hostname`, as `plan` issues them (at its
    Kubernetes release); every pod from one pass over the node's certificates (a render asks
    for each static pod of each master)."""
    mine = [i for i in desired_instances(plan, (hostname,)) if i.owner == hostname]
    out = {}
    for pod in POD_CERTS:
        for group in ([c.name for c in plan.etcd_clusters] if pod == "etcd" else [""]):
            rows = set(pod_rows(pod, group))
            names = sorted((i.id, i.cn, list(i.o), list(i.dns), list(i.ips), i.server) for i in mine if i.spec.name in rows)
            out[(pod, group)] = hashlib.sha256(json.dumps(names, separators=(",", ":")).encode()).hexdigest()[:16]
    return out


def names_digest(plan: Plan, hostname: str, pod: str, group: str = "") -> str:
    """`names_digests` of one static pod."""
    return names_digests(plan, hostname)[(pod, group)]


def pod_of(row: str, etcd_clusters: list[str] | tuple[str, ...]) -> tuple[str, str] | None:
    """(static pod, etcd cluster or "") that reads certificate row `row`; None: no static pod
    reads it (a CA, kubelet.conf, admin.conf, sa)."""
    for pod in POD_CERTS:
        for group in (etcd_clusters if pod == "etcd" else ("",)):
            if row in pod_rows(pod, group):
                return pod, group
    return None
