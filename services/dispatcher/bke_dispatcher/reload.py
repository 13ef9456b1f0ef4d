"""What must happen, per certificate, for a renewed file to take effect on its node: a table.

Why a table (STYLE §4): the rotation's step builder, `docs/certs.md` and the tests read these
rows, so what BKE does after writing a file and why it is enough cannot drift apart. Every
leaf or kubeconfig row of the certificate table (`bke.core.pki.table.CERTS`) has exactly one row
here (a unit test checks it); CAs and the service-account key pair are never renewed.

Actions:
    none             the component reads the file again by itself (`how` says when), or no
                     component on the node uses it (an operator's kubeconfig)
    restart-pod      the static pod `target` is restarted (`RestartStaticPod`): it reads the
                     file only at start
    restart-kubelet  `kubelet.service` is restarted (the kubelet's own rotation stays off:
                     BKE renews its client certificate)

`source` is the upstream code that decides the behaviour; `verified` says how far it was
checked: "source" (read in the upstream code named), or "paper" (from upstream's documented
behaviour and the code path named, without reading that exact revision).
After any row, the node's components are waited healthy before the next node.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["RELOADS", "Reload", "reload_for"]

Action = Literal["none", "restart-pod", "restart-kubelet"]

_ETCD_LISTENER = ("etcd client/pkg/transport/listener.go, TLSInfo.baseConfig: GetCertificate and "
                  "GetClientCertificate read CertFile/KeyFile again on every TLS handshake")
_CLIENT_GO_STATIC = ("kubernetes staging/src/k8s.io/client-go/transport/transport.go, TLSConfigFor: a kubeconfig "
                     "whose client certificate is embedded data is loaded once (ReloadTLSFiles only for files)")


@dataclass(frozen=True)
class Reload:
    cert: str  # a row name of bke.core.pki.table.CERTS; "*" stands for the etcd cluster
    action: Action
    target: str  # the component that uses the file (the static pod or unit to restart)
    how: str
    source: str
    verified: Literal["source", "paper"]


RELOADS: tuple[Reload, ...] = (
    Reload("apiserver", "none", "kube-apiserver",
           "serving certificate: watched and reloaded from its files (new connections get the new one)",
           "kubernetes staging/src/k8s.io/apiserver/pkg/server/options/serving.go, SecureServingOptions.ApplyTo: "
           "dynamiccertificates.NewDynamicServingContentFromFiles(\"serving-cert\", ...)", "source"),
    Reload("apiserver-kubelet-client", "none", "kube-apiserver",
           "client certificate to kubelets: reloaded from its files when it changes",
           "kubernetes pkg/kubelet/client/kubelet_client.go, KubeletClientConfig.transportConfig: "
           "ReloadTLSFiles: true (client-go transport/cert_rotation.go reloads and redials)", "source"),
    Reload("front-proxy-client", "none", "kube-apiserver",
           "aggregator proxy client certificate: watched and reloaded from its files",
           "kubernetes staging/src/k8s.io/kube-aggregator/pkg/apiserver/apiserver.go, NewWithDelegate: "
           "dynamiccertificates.NewDynamicServingContentFromFiles(\"aggregator-proxy-cert\", ...)", "source"),
    Reload("apiserver-etcd-client", "none", "kube-apiserver",
           "etcd client certificate: read again on every new connection's handshake; open connections keep "
           "the old one, which stays valid until its own expiry",
           "kubernetes staging/src/k8s.io/apiserver/pkg/storage/storagebackend/factory/etcd3.go, newETCD3Client: "
           "transport.TLSInfo{CertFile, KeyFile}.ClientConfig(); " + _ETCD_LISTENER, "source"),
    Reload("*-server", "none", "etcd",
           "etcd serving certificate: read again on every TLS handshake (a handshake that lands between "
           "the writes of the key and the certificate fails, once; clients retry another member, and "
           "members are rotated one at a time, so the cluster keeps its quorum: seen in the lab)",
           _ETCD_LISTENER, "source"),
    Reload("*-peer", "none", "etcd",
           "etcd peer certificate (server and client side of raft): read again on every TLS handshake "
           "(the same one-handshake window as the serving pair)",
           _ETCD_LISTENER, "source"),
    Reload("*-healthcheck-client", "none", "etcd",
           "used by no running component (BKE's etcd probes use the plain-HTTP metrics /health); for etcdctl",
           "BKE's etcd manifests (libs/bke/core/render/templates/etcd/*/etcd.yaml.j2): probes on the metrics port", "source"),
    Reload("admin.conf", "none", "operator",
           "an operator's kubeconfig: read by kubectl at every run", "kubectl reads its kubeconfig per invocation",
           "paper"),
    Reload("super-admin.conf", "none", "operator",
           "a break-glass kubeconfig: read by kubectl at every run", "kubectl reads its kubeconfig per invocation",
           "paper"),
    Reload("controller-manager.conf", "restart-pod", "kube-controller-manager",
           "embedded client certificate: loaded once at start", _CLIENT_GO_STATIC, "source"),
    Reload("scheduler.conf", "restart-pod", "kube-scheduler",
           "embedded client certificate: loaded once at start", _CLIENT_GO_STATIC, "source"),
    Reload("kubelet.conf", "restart-kubelet", "kubelet",
           "embedded client certificate; with rotateCertificates off the kubelet builds its client once at start",
           _CLIENT_GO_STATIC + "; kubernetes cmd/kubelet/app/server.go builds the certificate manager only "
           "when rotation is on", "paper"),
)

_BY_CERT = {r.cert: r for r in RELOADS}


def reload_for(cert: str) -> Reload:
    """The row for a certificate row name (etcd rows match their `<etcd-cluster>-` prefix)."""
    row = _BY_CERT.get(cert)
    if row is None and cert.startswith("etcd-"):
        row = _BY_CERT.get("*-" + cert.split("-", 2)[-1])
    if row is None:
        raise KeyError(f"no reload row for certificate {cert!r}")
    return row
