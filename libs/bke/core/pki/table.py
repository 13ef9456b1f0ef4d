"""The certificate set as data: one row per certificate, CA rows first, each leaf naming its CA.

Why a table (kubeadm's certlist.go, STYLE §4): issuance, the ensure step, the per-node file sets,
`bke certs files`, `check-expiration`, `renew NAME` and docs/certs.md all read these rows, so they
cannot drift apart.

A row says *what* a certificate is (CN, O, SANs, usages, validity, CA) and *who gets which file*:

* ``per="cluster"``: one instance for the cluster; ``cert``/``key`` list the placement rules.
* ``per="node"``: one instance per node that satisfies ``needs`` (e.g. every node running
  kube-apiserver gets its own apiserver certificate, SANs included); its files go to that node
  only (placement ``owner``).

Placement rules ("where"): ``all`` every node, ``master`` nodes with the master role,
``registers`` nodes that register as Kubernetes nodes, ``owner`` the instance's node, or a
component name from ``bke.core.plan.COMPONENTS`` (``kube-apiserver``, ``etcd-events``, ...): nodes
that run it.

Least privilege is written here and nowhere else: the cluster CA key goes only where
kube-controller-manager runs (it signs kubelet CSRs), ``sa.key`` only where kube-apiserver or
kube-controller-manager run, and the etcd and front-proxy CA keys go to no node at all (the certs
service keeps them, encrypted). etcd has one shared *client* CA (``etcd-ca``: the apiserver has
one etcd TLS configuration for every etcd cluster) and one *peer* CA per etcd cluster, so a member
of one cluster can never join another.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypedDict

from .subjects import subject_o
from bke.core.paths import (
    ADMIN_CONF,
    CONTROLLER_MANAGER_CONF,
    ETCD_CERT_DIRS,
    KUBELET_CONF,
    PKI_DIR,
    SCHEDULER_CONF,
)

__all__ = ["CERTS", "CertSpec", "Kind", "Place", "Usage", "by_name", "ca_rows", "leaf_rows"]

Kind = Literal["ca", "leaf", "keypair", "kubeconfig"]
Usage = Literal["ca", "server", "client", "server+client"]
SanRule = Literal["none", "ca", "apiserver", "etcd-member"]


@dataclass(frozen=True)
class Place:
    """``path`` goes to the nodes selected by ``where`` (see the module docstring)."""

    where: str
    path: str


@dataclass(frozen=True)
class CertSpec:
    """One row. For ``kubeconfig`` rows ``cert`` is the kubeconfig file (it embeds cert + key)."""

    name: str
    kind: Kind
    summary: str
    cn: str  # "{hostname}" is replaced by the owner node's name
    ca: str | None = None
    o: tuple[str, ...] = ()
    o_rule: str = ""  # a rule of bke.core.pki.subjects: which of `o` kubeadm of a given release drops
    sans: SanRule = "none"
    usage: Usage = "client"
    validity: Literal["ca", "leaf"] = "leaf"
    per: Literal["cluster", "node"] = "cluster"
    needs: str = "all"  # per="node": which nodes get an instance
    etcd: str | None = None  # the row exists only if the plan has this etcd cluster
    server: Literal["", "endpoint", "local"] = ""  # kubeconfig: endpoint, or local apiserver if any
    cert: tuple[Place, ...] = ()
    key: tuple[Place, ...] = ()

    @property
    def is_ca(self) -> bool:
        return self.kind == "ca"

    def o_for(self, kubernetes: str | None) -> tuple[str, ...]:
        """The organisations kubeadm of this Kubernetes release issues the row with (None: `o`)."""
        return subject_o(self.o, self.o_rule, kubernetes)


def _pki(name: str) -> str:
    return f"{PKI_DIR}/{name}"


def _own(path: str) -> tuple[Place, ...]:
    return (Place("owner", path),)


def _etcd_peer_ca(cluster: str) -> CertSpec:
    return CertSpec(
        f"{cluster}-peer-ca", "ca", f"peer CA of {cluster} only: members of other etcd clusters cannot join it",
        cn=f"{cluster}-peer-ca", sans="ca", usage="ca", validity="ca", etcd=cluster,
        cert=(Place(cluster, f"{ETCD_CERT_DIRS[cluster]}/peer-ca.crt"),),
    )


class _MemberFields(TypedDict):
    """The fields every etcd member row shares (typed, so `**member` is checked like keywords)."""

    per: Literal["cluster", "node"]
    needs: str
    etcd: str


def _etcd_member_rows(cluster: str) -> tuple[CertSpec, ...]:
    d = ETCD_CERT_DIRS[cluster]
    member: _MemberFields = {"per": "node", "needs": cluster, "etcd": cluster}
    return (
        CertSpec(f"{cluster}-server", "leaf", f"{cluster} member serving clients (also a client of itself: etcd's gateway)",
                 cn="{hostname}", ca="etcd-ca", sans="etcd-member", usage="server+client",
                 cert=_own(f"{d}/server.crt"), key=_own(f"{d}/server.key"), **member),
        CertSpec(f"{cluster}-peer", "leaf", f"{cluster} member to member (raft), trusted by {cluster}-peer-ca only",
                 cn="{hostname}", ca=f"{cluster}-peer-ca", sans="etcd-member", usage="server+client",
                 cert=_own(f"{d}/peer.crt"), key=_own(f"{d}/peer.key"), **member),
        CertSpec(f"{cluster}-healthcheck-client", "leaf", f"probes of the {cluster} member's client port",
                 cn="kube-etcd-healthcheck-client", ca="etcd-ca", o=("system:masters",),
                 cert=_own(f"{d}/healthcheck-client.crt"), key=_own(f"{d}/healthcheck-client.key"), **member),
    )


_ETCD = tuple(ETCD_CERT_DIRS)  # etcd-data, etcd-events, etcd-pods

CERTS: tuple[CertSpec, ...] = (
    # --- CAs and the service-account key pair ---------------------------------------------------
    CertSpec("ca", "ca", "cluster CA: trusted by every component; its key signs kubelet CSRs in kube-controller-manager",
             cn="kubernetes", sans="ca", usage="ca", validity="ca",
             cert=(Place("all", _pki("ca.crt")),), key=(Place("kube-controller-manager", _pki("ca.key")),)),
    CertSpec("front-proxy-ca", "ca", "aggregation layer CA (requestheader client CA); key on no node",
             cn="front-proxy-ca", sans="ca", usage="ca", validity="ca",
             cert=(Place("kube-apiserver", _pki("front-proxy-ca.crt")),
                   Place("kube-controller-manager", _pki("front-proxy-ca.crt")))),
    CertSpec("etcd-ca", "ca", "shared etcd client CA: signs every member's server cert and the etcd clients; key on no node",
             cn="etcd-ca", sans="ca", usage="ca", validity="ca",
             cert=(Place("kube-apiserver", f"{ETCD_CERT_DIRS['etcd-data']}/ca.crt"),
                   *(Place(c, f"{ETCD_CERT_DIRS[c]}/ca.crt") for c in _ETCD))),
    *(_etcd_peer_ca(c) for c in _ETCD),
    CertSpec("sa", "keypair", "service-account token key pair: apiserver signs and verifies, controller-manager signs",
             cn="", validity="ca",
             cert=(Place("kube-apiserver", _pki("sa.pub")),),
             key=(Place("kube-apiserver", _pki("sa.key")), Place("kube-controller-manager", _pki("sa.key")))),
    # --- kube-apiserver ---------------------------------------------------------------------------
    CertSpec("apiserver", "leaf", "kube-apiserver serving certificate (one per apiserver node)",
             cn="kube-apiserver", ca="ca", sans="apiserver", usage="server", per="node", needs="kube-apiserver",
             cert=_own(_pki("apiserver.crt")), key=_own(_pki("apiserver.key"))),
    # kubeadm drops the group from 1.37.0, 1.36.1 and 1.35.5 on (bke.core.pki.subjects: PR 138957 and
    # its cherry-picks) and binds the CN to system:kubelet-api-admin instead (bke.core.rbac)
    CertSpec("apiserver-kubelet-client", "leaf", "kube-apiserver to kubelets",
             cn="kube-apiserver-kubelet-client", ca="ca", o=("kubeadm:cluster-admins",), o_rule="kubeadm-138957",
             per="node", needs="kube-apiserver",
             cert=_own(_pki("apiserver-kubelet-client.crt")), key=_own(_pki("apiserver-kubelet-client.key"))),
    CertSpec("front-proxy-client", "leaf", "kube-apiserver to aggregated API servers",
             cn="front-proxy-client", ca="front-proxy-ca", per="node", needs="kube-apiserver",
             cert=_own(_pki("front-proxy-client.crt")), key=_own(_pki("front-proxy-client.key"))),
    CertSpec("apiserver-etcd-client", "leaf", "kube-apiserver to every etcd cluster (one TLS config for all overrides)",
             cn="kube-apiserver-etcd-client", ca="etcd-ca", per="node", needs="kube-apiserver",
             cert=_own(_pki("apiserver-etcd-client.crt")), key=_own(_pki("apiserver-etcd-client.key"))),
    # --- etcd members, per etcd cluster -----------------------------------------------------------
    *(row for c in _ETCD for row in _etcd_member_rows(c)),
    # --- kubeconfigs (client cert + key embedded, like kubeadm) ------------------------------------
    CertSpec("admin.conf", "kubeconfig", "cluster administrator (RBAC group kubeadm:cluster-admins)",
             cn="kubernetes-admin", ca="ca", o=("kubeadm:cluster-admins",), per="node", needs="master",
             server="endpoint", cert=_own(ADMIN_CONF)),
    # On no node (kubeadm keeps it on the init node only): system:masters bypasses RBAC and
    # cannot be revoked short of a new CA, so it stays encrypted in the PKI store. The dispatcher
    # uses it in memory for the bootstrap-RBAC step only (as kubeadm init uses it to create the
    # kubeadm:cluster-admins binding), and `bke certs kubeconfig super-admin.conf` gives it out
    # for break-glass use. SUPER_ADMIN_CONF remains the path an operator would put it at.
    CertSpec("super-admin.conf", "kubeconfig", "break-glass administrator (system:masters bypasses RBAC); on no node",
             cn="kubernetes-super-admin", ca="ca", o=("system:masters",), server="endpoint"),
    CertSpec("controller-manager.conf", "kubeconfig", "kube-controller-manager to the local apiserver, else the endpoint",
             cn="system:kube-controller-manager", ca="ca", per="node", needs="kube-controller-manager",
             server="local", cert=_own(CONTROLLER_MANAGER_CONF)),
    CertSpec("scheduler.conf", "kubeconfig", "kube-scheduler to the local apiserver, else the endpoint",
             cn="system:kube-scheduler", ca="ca", per="node", needs="kube-scheduler",
             server="local", cert=_own(SCHEDULER_CONF)),
    CertSpec("kubelet.conf", "kubeconfig", "kubelet of a registering node (Node authorizer identity)",
             cn="system:node:{hostname}", ca="ca", o=("system:nodes",), per="node", needs="registers",
             server="endpoint", cert=_own(KUBELET_CONF)),
)

_BY_NAME = {row.name: row for row in CERTS}


def by_name(name: str) -> CertSpec | None:
    return _BY_NAME.get(name)


def ca_rows() -> tuple[CertSpec, ...]:
    """CAs and key pairs: issued before (and never renewed like) the leaves."""
    return tuple(r for r in CERTS if r.kind in ("ca", "keypair"))


def leaf_rows() -> tuple[CertSpec, ...]:
    return tuple(r for r in CERTS if r.kind in ("leaf", "kubeconfig"))
