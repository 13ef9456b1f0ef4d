"""Which URLs a health probe may ask, and which files it may read as TLS material.

Why: a WaitHealth step (and a ReplaceFiles probe, a RestartStaticPod's health URL) makes the
agent fetch a URL from inside the node, with TLS files it reads from the node. Unlimited, a
signed command could ask any address the node reaches (a metadata service, an internal API)
and read any file as a certificate. So a probe asks only the node's own component endpoints,
as bke.core.node_steps.health_steps names them: loopback (or the node's own address) on a known
port, with that port's scheme and paths; no user, query or fragment. Its TLS files are BKE's
own PKI (`/etc/kubernetes/pki/...`). And the agent answers with the status it saw, never the
body (agent/bke_agent/backends/health.py). The ports are the plan's fixed layout
(bke.core.plan.ETCD_LAYOUT's metrics ports, bke.core.render.layout.PORTS): a unit test holds them equal.

An HTTPS probe verifies the server: with the step's TLS files when it names them, else against
the CA that signs that port's serving certificate (SERVING_CAS), a file every node running the
component already has, and the URL's host as the name checked (the apiserver's certificate
names 127.0.0.1 and the node's address). A CA file that is missing fails the probe; it is never
asked unverified instead. kube-controller-manager and kube-scheduler have no such CA: BKE's
manifests give them no serving certificate, so each signs one itself when it starts (in memory,
as kubeadm's do) and nothing on the node can verify it. Their probes are the one HTTPS ask left
unverified (NO_SERVING_CA); their answer is a status only, and closing this takes serving
certificates issued for them (a row of bke.core.pki.table and the manifests' --tls-cert-file).
"""
from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from bke.contracts.agent_steps import TlsFiles
from bke.core.paths import PKI_DIR

__all__ = ["HEALTH_ENDPOINTS", "LOOPBACK_HOSTS", "NO_SERVING_CA", "SERVING_CAS", "health_url_refusal", "serving_ca",
           "tls_refusal"]

# port -> (scheme, the paths asked there, what answers)
HEALTH_ENDPOINTS: dict[int, tuple[str, frozenset[str], str]] = {
    2381: ("http", frozenset({"/health"}), "etcd-data's metrics listener"),
    2384: ("http", frozenset({"/health"}), "etcd-events' metrics listener"),
    2387: ("http", frozenset({"/health"}), "etcd-pods' metrics listener"),
    10248: ("http", frozenset({"/healthz"}), "the kubelet's healthz"),
    8404: ("http", frozenset({"/healthz"}), "haproxy's monitor"),
    6443: ("https", frozenset({"/livez", "/readyz", "/healthz"}), "kube-apiserver"),
    10257: ("https", frozenset({"/healthz"}), "kube-controller-manager"),
    10259: ("https", frozenset({"/healthz"}), "kube-scheduler"),
}
# HTTPS port -> the CA file (on the node) that signs what it serves
SERVING_CAS: dict[int, str] = {6443: f"{PKI_DIR}/ca.crt"}  # kube-apiserver: apiserver.crt, from the cluster CA
# HTTPS ports whose component serves a certificate it signed itself (see the module docstring)
NO_SERVING_CA = frozenset({10257, 10259})
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "::1"})
_PKI = PKI_DIR + "/"


def _host_ok(host: str, node_ip: str | None) -> bool:
    if host in LOOPBACK_HOSTS:
        return True
    if node_ip is None:
        return False
    try:
        return ipaddress.ip_address(host) == ipaddress.ip_address(node_ip)
    except ValueError:
        return False


def health_url_refusal(url: str, node_ip: str | None = None) -> str | None:
    """Why a probe may not ask `url` (None if it may): loopback or `node_ip`, a known port with
    its scheme and path."""
    try:
        u = urlsplit(url)
        port = u.port
    except ValueError:
        return f"health URL {url!r} does not parse"
    if u.username is not None or u.password is not None or u.query or u.fragment or "\\" in url:
        return f"health URL {url!r}: no user, query or fragment"
    endpoint = HEALTH_ENDPOINTS.get(port) if port is not None else None
    if endpoint is None:
        return f"health URL {url!r}: not a component's health port ({', '.join(map(str, sorted(HEALTH_ENDPOINTS)))})"
    scheme, paths, what = endpoint
    if not _host_ok(u.hostname or "", node_ip):
        return f"health URL {url!r}: only the node's own address is probed (loopback or {node_ip or 'its IP'})"
    if u.scheme != scheme or u.path not in paths:
        return f"health URL {url!r}: {what} answers {scheme}://<node>:{port}{'|'.join(sorted(paths))}"
    return None


def tls_refusal(tls: TlsFiles | None) -> str | None:
    """Why a step may not read these files as TLS material (None if it may): BKE's PKI only."""
    if tls is None:
        return None
    for path in (tls.ca, tls.cert, tls.key):
        if not path.startswith(_PKI) or "\x00" in path or ".." in path.split("/") or path.endswith("/"):
            return f"TLS file {path!r}: only BKE's own certificates and keys under {PKI_DIR} are read"
    return None


def serving_ca(url: str) -> str | None:
    """The CA file an HTTPS probe of `url` verifies its server with (None: an HTTP URL, or a port
    of NO_SERVING_CA). A port of neither table is refused before (health_url_refusal): ValueError."""
    u = urlsplit(url)
    if u.scheme != "https":
        return None
    port = u.port
    if port in SERVING_CAS:
        return SERVING_CAS[port]
    if port in NO_SERVING_CA:
        return None
    raise ValueError(f"{url}: no CA is known for this HTTPS port")
