"""Node locations, ports and images the renderer owns, beyond the shared ones in bke.core.paths.

(Candidates for bke.core.paths once another service needs them; kept here so the renderer's files
stay in one place meanwhile.)
"""
from __future__ import annotations

from bke.core.paths import PKI_DIR

__all__ = [
    "CONTAINERD_CERTS_D",
    "CONTAINERD_BIN",
    "CONTAINERD_CONFIG",
    "CONTAINERD_UNIT",
    "CONTAINERD_SOCKET",
    "CRICTL_CONFIG",
    "HAPROXY_CFG",
    "IMAGES",
    "KEEPALIVED_CHECK",
    "KEEPALIVED_CONF",
    "SECRET_PATHS",
    "KUBELET_BIN",
    "KUBELET_UNIT",
    "PKI",
    "PORTS",
]

KUBELET_UNIT = "/etc/systemd/system/kubelet.service"
CONTAINERD_UNIT = "/etc/systemd/system/containerd.service"
CONTAINERD_BIN = "/usr/local/bin/containerd"  # where the upstream release tarball puts it
KUBELET_BIN = "/usr/bin/kubelet"
CONTAINERD_CONFIG = "/etc/containerd/config.toml"
CONTAINERD_CERTS_D = "/etc/containerd/certs.d"
CONTAINERD_SOCKET = "/run/containerd/containerd.sock"
CRICTL_CONFIG = "/etc/crictl.yaml"  # where crictl looks by default
HAPROXY_CFG = "/etc/haproxy/haproxy.cfg"
KEEPALIVED_CONF = "/etc/keepalived/keepalived.conf"
# The rendered files that hold a credential (render.FILES' `secret` rules: the VRRP password):
# whoever sends one seals it to the node's agent (tests/unit hold the two equal).
SECRET_PATHS = frozenset({KEEPALIVED_CONF})
KEEPALIVED_CHECK = "/etc/keepalived/check_apiserver.sh"

# kubeadm's file names under /etc/kubernetes/pki (what `bke certs issue` writes).
PKI = {
    "ca.crt": f"{PKI_DIR}/ca.crt",
    "ca.key": f"{PKI_DIR}/ca.key",
    "apiserver.crt": f"{PKI_DIR}/apiserver.crt",
    "apiserver.key": f"{PKI_DIR}/apiserver.key",
    "apiserver-kubelet-client.crt": f"{PKI_DIR}/apiserver-kubelet-client.crt",
    "apiserver-kubelet-client.key": f"{PKI_DIR}/apiserver-kubelet-client.key",
    "apiserver-etcd-client.crt": f"{PKI_DIR}/apiserver-etcd-client.crt",
    "apiserver-etcd-client.key": f"{PKI_DIR}/apiserver-etcd-client.key",
    "front-proxy-ca.crt": f"{PKI_DIR}/front-proxy-ca.crt",
    "front-proxy-client.crt": f"{PKI_DIR}/front-proxy-client.crt",
    "front-proxy-client.key": f"{PKI_DIR}/front-proxy-client.key",
    "sa.key": f"{PKI_DIR}/sa.key",
    "sa.pub": f"{PKI_DIR}/sa.pub",
}

PORTS = {
    "kube-apiserver": 6443,
    "kube-controller-manager": 10257,
    "kube-scheduler": 10259,
    "kubelet": 10250,
    "kubelet-healthz": 10248,
    "kube-proxy-metrics": 10249,
    "kube-proxy-healthz": 10256,
    "haproxy-healthz": 8404,
}

# The load balancer images are not on registry.k8s.io; air-gapped installs mirror them through
# containerRuntime.registryMirrors. The shapes follow kubeadm's HA guide (ha-considerations.md).
IMAGES = {
    "haproxy": "docker.io/library/haproxy:2.8.5-alpine",
    "keepalived": "docker.io/osixia/keepalived:2.0.20",
}
