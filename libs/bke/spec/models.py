"""The user's cluster description: one BKECluster and one BKENode per node.

Field names follow the original system's resources (camelCase on the wire). Defaults are
named here once; the README's "Spec defaults" table is generated from these models.
Structure and types are checked by pydantic; cross-field rules live in `validate.py`
so that every error can be reported at once with its field path.
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

__all__ = [
    "API_VERSION",
    "Addon",
    "ApiServer",
    "BKECluster",
    "BKEClusterSpec",
    "BKENode",
    "BKENodeSpec",
    "Certificates",
    "Cluster",
    "ClusterConfig",
    "ClusterSpec",
    "ComponentArgs",
    "ContainerRuntime",
    "ControlPlaneEndpoint",
    "CoreDNS",
    "Etcd",
    "KEY_ALGORITHMS",
    "KubeProxy",
    "LoadBalancer",
    "Metadata",
    "Networking",
    "NodeComponentArgs",
    "NodeLoadBalancer",
    "ROLES",
]

API_VERSION = "bke.bocloud.com/v1beta1"
KEY_ALGORITHMS = ("RSA-2048", "RSA-3072", "RSA-4096", "ECDSA-P256", "ECDSA-P384")
# `master/node` is one literal role; `master` + `node` on one node means the same.
ROLES = (
    "master",
    "node",
    "master/node",
    "etcd",
    "apiserver",
    "controller-manager",
    "scheduler",
    "etcd-event",
    "etcd-pod",
)
KeyAlgorithm = Literal["RSA-2048", "RSA-3072", "RSA-4096", "ECDSA-P256", "ECDSA-P384"]


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True, strict=False
    )


class Metadata(_Model):
    name: str
    namespace: str | None = None
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}


class ControlPlaneEndpoint(_Model):
    host: str
    port: int


class Networking(_Model):
    service_subnet: str = "10.96.0.0/12"  # kubeadm's default
    pod_subnet: str = "10.244.0.0/16"  # flannel/calico manifests' common default
    dns_domain: str = "cluster.local"


class Certificates(_Model):
    key_algorithm: KeyAlgorithm = "RSA-2048"  # kubeadm's default
    ca_validity_days: int = Field(3650, ge=1, le=36500)
    validity_days: int = Field(365, ge=1, le=3650)


class ComponentArgs(_Model):
    extra_args: dict[str, str] = {}


class ApiServer(ComponentArgs):
    cert_sans: list[str] = Field(default_factory=list, alias="certSANs")


class Etcd(ComponentArgs):
    data_dir: str = "/var/lib/etcd"  # etcd-events and etcd-pods use <dataDir>-events / -pods


class ContainerRuntime(_Model):
    sandbox_image: str | None = None  # None: <imageRepo>/pause:<the version's pause tag>
    cgroup_driver: Literal["systemd", "cgroupfs"] = "systemd"
    registry_mirrors: dict[str, list[str]] = {}
    insecure_registries: list[str] = []


class LoadBalancer(_Model):
    # vip: an endpoint host that is no node's address is a virtual IP that BKE serves with
    # keepalived + haproxy on the masters. external: the endpoint is a load balancer BKE does not
    # run (a public cloud's, where a VIP cannot move between hosts; or an appliance): nothing is
    # rendered for it, and it must forward to every master's kube-apiserver on 6443.
    type: Literal["vip", "external"] = "vip"
    interface: str = "eth0"  # each node may override it: BKENode spec.loadBalancer.interface
    virtual_router_id: int = Field(51, ge=1, le=255)
    # unicast: each master sends its VRRP adverts to the other masters' addresses (many data
    # centres drop multicast); multicast: to VRRP's group 224.0.0.18.
    vrrp: Literal["unicast", "multicast"] = "unicast"


class NodeLoadBalancer(_Model):
    interface: str | None = None  # None: the cluster's loadBalancer.interface


class KubeProxy(_Model):
    # `kubeProxy.enabled: false` as kOps spells it (kubeadm: `proxy.disabled`): no kube-proxy at
    # all, e.g. a CNI that replaces it. The addons phase installs it by default.
    enabled: bool = True
    # iptables: every supported minor; nftables: beta in 1.31, GA in 1.33, needs kernel 5.13+;
    # ipvs: deprecated from 1.35 (a warning). The addons phase and node-env read it.
    mode: Literal["iptables", "nftables", "ipvs"] = "iptables"


class CoreDNS(_Model):
    # `coreDNS.enabled: false`: no cluster DNS from BKE (kubeadm: `dns.disabled`).
    enabled: bool = True


class Cluster(_Model):
    kubernetes_version: str
    etcd_version: str
    containerd_version: str
    networking: Networking = Networking()
    image_repo: str = "registry.k8s.io"
    http_repo: str = "http://127.0.0.1:40080"  # where `bke bundle serve` listens by default
    # The pod network: calico (the seed's choice) installed by the addons phase, or "none"
    # when the user brings their own CNI as an addon.
    cni: Literal["calico", "none"] = "calico"
    kube_proxy: KubeProxy = KubeProxy()
    core_dns: CoreDNS = Field(CoreDNS(), alias="coreDNS")
    certificates: Certificates = Certificates()
    api_server: ApiServer = ApiServer()
    controller_manager: ComponentArgs = ComponentArgs()
    scheduler: ComponentArgs = ComponentArgs()
    etcd: Etcd = Etcd()
    etcd_events: ComponentArgs = ComponentArgs()
    etcd_pods: ComponentArgs = ComponentArgs()
    kubelet: ComponentArgs = ComponentArgs()
    container_runtime: ContainerRuntime = ContainerRuntime()
    load_balancer: LoadBalancer = LoadBalancer()
    # Escape hatch for the renderer's denylist: flags named here may be set in extraArgs
    # although they would otherwise be refused ("I know better").
    allow_unsafe_flags: list[str] = []


class Addon(_Model):
    name: str
    version: str
    # A folder of manifests: a user addon, or the user's own copy of a built-in (rbac excepted),
    # applied in the built-in's place. None: a built-in, whose `version` overrides the default.
    path: str | None = None


class ClusterConfig(_Model):
    cluster: Cluster
    addons: list[Addon] = []


class BKEClusterSpec(_Model):
    control_plane_endpoint: ControlPlaneEndpoint
    cluster_config: ClusterConfig


class BKECluster(_Model):
    api_version: Literal["bke.bocloud.com/v1beta1"]
    kind: Literal["BKECluster"]
    metadata: Metadata
    spec: BKEClusterSpec


class NodeComponentArgs(_Model):
    """Per-node override: merged over the cluster's extraArgs flag by flag."""

    extra_args: dict[str, str] = {}


class BKENodeSpec(_Model):
    hostname: str
    ip: str
    port: int = 22
    username: str = "root"
    role: list[str]
    # The node's CPU architecture, as Go and upstream downloads name it: which binaries it fetches.
    arch: Literal["amd64", "arm64"] = "amd64"
    labels: dict[str, str] = {}
    load_balancer: NodeLoadBalancer | None = None
    api_server: NodeComponentArgs | None = None
    controller_manager: NodeComponentArgs | None = None
    scheduler: NodeComponentArgs | None = None
    etcd: NodeComponentArgs | None = None
    etcd_events: NodeComponentArgs | None = None
    etcd_pods: NodeComponentArgs | None = None
    kubelet: NodeComponentArgs | None = None


class BKENode(_Model):
    api_version: Literal["bke.bocloud.com/v1beta1"]
    kind: Literal["BKENode"]
    metadata: Metadata | None = None
    spec: BKENodeSpec


class ClusterSpec(_Model):
    """The whole parsed description: what the planner receives after loading."""

    cluster: BKECluster
    nodes: list[BKENode]

    @property
    def name(self) -> str:
        return self.cluster.metadata.name

    @property
    def config(self) -> Cluster:
        return self.cluster.spec.cluster_config.cluster
