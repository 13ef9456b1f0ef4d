"""Typed parameters of every template: a template reads only these fields (StrictUndefined makes
a missing one an error), and every field is computed by the builders in components.py/lb.py."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = [
    "ApiserverPod",
    "Backend",
    "CheckScript",
    "ContainerdConfig",
    "ContainerdUnit",
    "ControllerManagerPod",
    "CoreDNSAddon",
    "EtcdPod",
    "HaproxyCfg",
    "HaproxyPod",
    "HostEntry",
    "HostsToml",
    "KeepalivedConf",
    "KeepalivedPod",
    "KubeProxyAddon",
    "KubeletConfig",
    "KubeletUnit",
    "Params",
    "SchedulerPod",
    "Taint",
]


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EtcdPod(Params):
    name: str  # etcd | etcd-events | etcd-pods: the static pod's name and component label
    image: str
    flags: list[str]
    client_port: int
    peer_port: int
    metrics_port: int
    data_dir: str
    cert_dir: str
    advertise_client_url: str
    probe_host: str  # the loopback address the metrics listener binds
    livez: bool  # etcd >= 3.5.11 serves /livez and /readyz (only the 3.5 template branches on it)
    certificate_names: str  # bke.core.pki.pod_certs.names_digest: new names restart the pod


class ApiserverPod(Params):
    image: str
    flags: list[str]
    advertise_address: str
    port: int
    pki_dir: str
    certificate_names: str  # bke.core.pki.pod_certs.names_digest: new names restart the pod


class ControllerManagerPod(Params):
    image: str
    flags: list[str]
    port: int
    pki_dir: str
    kubeconfig: str
    certificate_names: str  # bke.core.pki.pod_certs.names_digest: new names restart the pod


class SchedulerPod(Params):
    image: str
    flags: list[str]
    port: int
    kubeconfig: str
    certificate_names: str  # bke.core.pki.pod_certs.names_digest: new names restart the pod


class Backend(Params):
    name: str
    address: str  # IP, bracketed for IPv6
    port: int


class HaproxyCfg(Params):
    frontend_port: int
    health_port: int
    backends: list[Backend]


class HaproxyPod(Params):
    image: str
    config_path: str
    frontend_port: int
    health_port: int
    config_digest: str  # node_files.config_digest of haproxy.cfg's inputs: a new config restarts the pod


class KeepalivedConf(Params):
    interface: str  # the node's own, else the cluster's loadBalancer.interface
    # unicast VRRP: this node's address and the other keepalived nodes'; None/[] for multicast,
    # and for a single keepalived node (no peer to advertise to).
    unicast_src_ip: str | None
    unicast_peers: list[str]
    router_id: int
    state: str
    priority: int
    weight: int
    # VRRP v2's PASS authentication; an IPv6 VIP runs VRRP v3, which has none (keepalived reports
    # a config error for it: vrrp.c "VRRP version 3 does not support authentication", 2.0.20 and 2.2.7).
    authentication: bool
    password: str
    vip: str
    check_path: str


class KeepalivedPod(Params):
    image: str
    config_path: str
    check_path: str
    config_digest: str  # of keepalived.conf's inputs but its password, and the check script's


class CheckScript(Params):
    port: int


class Taint(Params):
    key: str
    value: str
    effect: str


class KubeletConfig(Params):
    registered: bool  # False: standalone kubelet on an etcd-only node (static pods only)
    cgroup_driver: str
    cluster_dns: list[str]
    cluster_domain: str
    ca_file: str
    static_pod_path: str
    runtime_endpoint: str
    healthz_port: int
    max_pods: int
    taints: list[Taint]


class KubeletUnit(Params):
    binary: str
    flags: list[str]
    standalone: bool


class ContainerdUnit(Params):
    binary: str
    config: str


class ContainerdConfig(Params):
    root: str
    state: str
    socket: str
    sandbox_image: str
    systemd_cgroup: bool
    certs_dir: str


class HostEntry(Params):
    url: str
    capabilities: list[str]
    skip_verify: bool


class HostsToml(Params):
    server: str
    hosts: list[HostEntry]


class KubeProxyAddon(Params):
    image: str
    server: str
    cluster_cidr: str
    mode: str
    healthz_port: int
    metrics_port: int


class CoreDNSAddon(Params):
    image: str
    dns_ip: str
    domain: str
    replicas: int
