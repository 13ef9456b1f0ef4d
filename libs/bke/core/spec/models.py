"""The user's cluster description: one BKECluster and one BKENode per node.

Field names follow the original system's resources (camelCase on the wire). Defaults are
named here once, and each field's `description` says what it does for the user: the field table
(docs/reference/spec.md) and the JSON Schema (`bke spec schema`) are generated from these models.
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


_UNUSED = "Accepted for Kubernetes-style tooling; BKE does not use it."


class Metadata(_Model):
    name: str = Field(description="The resource's name. A BKECluster's is a DNS-1123 label (one token of the cluster's "
                                  "bus subjects and store keys); no two BKENode documents may share one.")
    namespace: str | None = Field(None, description=_UNUSED)
    labels: dict[str, str] = Field({}, description=_UNUSED + " A node's Kubernetes labels are its `spec.labels`.")
    annotations: dict[str, str] = Field({}, description=_UNUSED)


class ControlPlaneEndpoint(_Model):
    host: str = Field(description="Where clients reach the Kubernetes API: a master's address (kube-apiserver on 6443), "
                                  "a virtual IP that is no node's address (served by keepalived and haproxy on the "
                                  "masters), or an external load balancer (`loadBalancer.type: external`).")
    port: int = Field(description="The endpoint's TCP port: 6443 on a master's address, another port (e.g. 36443) on a VIP.")


class Networking(_Model):
    # kubeadm's default
    service_subnet: str = Field("10.96.0.0/12", description="The Services' virtual IP range (one CIDR).")
    # flannel/calico manifests' common default
    pod_subnet: str = Field("10.244.0.0/16", description="The pods' address range: one CIDR, or an IPv4 and an IPv6 "
                                                          "CIDR separated by a comma (dual stack). It may not overlap "
                                                          "the service subnet.")
    dns_domain: str = Field("cluster.local", description="The cluster's DNS domain (Services are `<name>.<namespace>.svc.<dnsDomain>`).")


class Certificates(_Model):
    # kubeadm's default
    key_algorithm: KeyAlgorithm = Field("RSA-2048", description="The key type of every CA and certificate BKE issues.")
    ca_validity_days: int = Field(3650, ge=1, le=36500, description="How long a new CA is valid, in days.")
    validity_days: int = Field(365, ge=1, le=3650, description="How long a new leaf certificate is valid, in days.")


class ComponentArgs(_Model):
    extra_args: dict[str, str] = Field({}, description="Flags for the component, `flag-name: \"value\"` (no leading "
                                                       "dashes; values are strings), judged by the denylist, the version "
                                                       "gates, the flag table and each flag's value type.")


class ApiServer(ComponentArgs):
    cert_sans: list[str] = Field([], alias="certSANs",
                                 description="Extra names (IP addresses or DNS names, `*.` wildcards allowed) in "
                                             "the kube-apiserver's serving certificate.")


class Etcd(ComponentArgs):
    data_dir: str = Field("/var/lib/etcd", description="etcd's data directory on its members; the events and pods "
                                                        "etcd clusters use `<dataDir>-events` and `<dataDir>-pods`.")


class ContainerRuntime(_Model):
    sandbox_image: str | None = Field(None, description="containerd's pause image. Unset: `<imageRepo>/pause` "
                                                         "with the tag the Kubernetes version pairs with.")
    cgroup_driver: Literal["systemd", "cgroupfs"] = Field("systemd", description="The cgroup driver of containerd "
                                                                                 "and the kubelet.")
    registry_mirrors: dict[str, list[str]] = Field({}, description="Per registry (`host[:port]`), the mirror URLs "
                                                                   "(http or https) containerd tries first, in order.")
    insecure_registries: list[str] = Field([], description="Registries (`host[:port]`) containerd pulls from without "
                                                           "verifying TLS, or over plain HTTP.")


class LoadBalancer(_Model):
    # vip: an endpoint host that is no node's address is a virtual IP that BKE serves with
    # keepalived + haproxy on the masters. external: the endpoint is a load balancer BKE does not
    # run (a public cloud's, where a VIP cannot move between hosts; or an appliance): nothing is
    # rendered for it, and it must forward to every master's kube-apiserver on 6443.
    type: Literal["vip", "external"] = Field("vip", description="`vip`: an endpoint host that is no node's "
                                                               "address is a virtual IP BKE serves with keepalived "
                                                               "and haproxy on the masters. `external`: a load "
                                                               "balancer BKE does not run, forwarding to every "
                                                               "master's kube-apiserver on 6443.")
    interface: str = Field("eth0", description="The network interface keepalived holds the VIP on; a node may "
                                               "override it (BKENode `spec.loadBalancer.interface`).")
    virtual_router_id: int = Field(51, ge=1, le=255, description="The VRRP router id of the VIP, unique among the "
                                                                 "VRRP instances of its network.")
    # unicast: many data centres drop multicast
    vrrp: Literal["unicast", "multicast"] = Field("unicast", description="`unicast`: each master sends its VRRP "
                                                                         "adverts to the other masters' addresses; "
                                                                         "`multicast`: to VRRP's group 224.0.0.18.")


class NodeLoadBalancer(_Model):
    interface: str | None = Field(None, description="This master's keepalived interface. Unset: the cluster's "
                                                    "`loadBalancer.interface`.")


class KubeProxy(_Model):
    # `kubeProxy.enabled: false` as kOps spells it (kubeadm: `proxy.disabled`): no kube-proxy at
    # all, e.g. a CNI that replaces it. The addons phase installs it by default.
    enabled: bool = Field(True, description="Install kube-proxy (the addons phase). `false`: none at all, e.g. "
                                            "for a CNI that replaces it.")
    # The addons phase and node-env read it.
    mode: Literal["iptables", "nftables", "ipvs"] = Field("iptables", description="kube-proxy's mode. `nftables` "
                                                                                  "needs kernel 5.13 or newer; "
                                                                                  "`ipvs` is deprecated from "
                                                                                  "Kubernetes 1.35 (a warning).")


class CoreDNS(_Model):
    # kubeadm: `dns.disabled`
    enabled: bool = Field(True, description="Install CoreDNS (the addons phase). `false`: no cluster DNS from BKE.")


class Cluster(_Model):
    kubernetes_version: str = Field(description="Kubernetes release, e.g. `v1.33.2`: any patch of a supported minor.")
    etcd_version: str = Field(description="etcd release, e.g. `v3.5.21`: any patch of a supported minor.")
    containerd_version: str = Field(description="containerd release, e.g. `v2.1.1`: any patch of a supported minor.")
    networking: Networking = Field(Networking(), description="The cluster's address ranges and DNS domain.")
    image_repo: str = Field("registry.k8s.io", description="The registry the control-plane and addon images are "
                                                           "pulled from.")
    # where `bke bundle serve` listens by default
    http_repo: str = Field("http://127.0.0.1:40080", description="The HTTP server the nodes fetch binaries and "
                                                                 "manifests from (`bke bundle serve`).")
    # calico is the seed's choice
    cni: Literal["calico", "none"] = Field("calico", description="The pod network: `calico`, installed by the addons "
                                                                 "phase, or `none` when you bring your own CNI as an "
                                                                 "addon.")
    kube_proxy: KubeProxy = Field(KubeProxy(), description="The kube-proxy addon.")
    core_dns: CoreDNS = Field(CoreDNS(), alias="coreDNS", description="The CoreDNS addon.")
    certificates: Certificates = Field(Certificates(), description="How BKE issues the cluster's certificates.")
    api_server: ApiServer = Field(ApiServer(), description="kube-apiserver: flags and certificate names.")
    controller_manager: ComponentArgs = Field(ComponentArgs(), description="kube-controller-manager flags.")
    scheduler: ComponentArgs = Field(ComponentArgs(), description="kube-scheduler flags.")
    etcd: Etcd = Field(Etcd(), description="The main etcd cluster (etcd-data): flags and data directory.")
    etcd_events: ComponentArgs = Field(ComponentArgs(), description="Flags of the events etcd cluster (nodes with "
                                                                    "role `etcd-event`).")
    etcd_pods: ComponentArgs = Field(ComponentArgs(), description="Flags of the pods etcd cluster (nodes with role "
                                                                  "`etcd-pod`).")
    kubelet: ComponentArgs = Field(ComponentArgs(), description="kubelet flags, on every node.")
    container_runtime: ContainerRuntime = Field(ContainerRuntime(), description="containerd's configuration.")
    load_balancer: LoadBalancer = Field(LoadBalancer(), description="How a virtual IP endpoint is served.")
    # Escape hatch for the renderer's denylist ("I know better").
    allow_unsafe_flags: list[str] = Field([], description="Refused `extraArgs` flags to let through anyway: `flag` "
                                                          "for every component, `component/flag` for one. Each use "
                                                          "is a warning.")


class Addon(_Model):
    name: str = Field(description="A built-in addon (kube-proxy, calico, coredns) or your own (a DNS-1123 label: "
                                  "it names the Secret `bke-addon-<name>` that records the addon's objects).")
    version: str = Field(description="A built-in's version to install instead of the default, or your addon's "
                                     "version.")
    path: str | None = Field(None, description="A folder of manifests: your addon, or your own copy of a built-in "
                                               "(rbac excepted), applied in the built-in's place. Unset: a "
                                               "built-in, whose `version` overrides the default.")


class ClusterConfig(_Model):
    cluster: Cluster = Field(description="Versions, networking, certificates and component settings.")
    addons: list[Addon] = Field([], description="Addons applied after the built-in ones, in this order; an entry "
                                                 "named like a built-in changes that built-in.")


class BKEClusterSpec(_Model):
    control_plane_endpoint: ControlPlaneEndpoint = Field(description="Where clients reach the Kubernetes API.")
    cluster_config: ClusterConfig = Field(description="The cluster's configuration and addons.")


class BKECluster(_Model):
    """The cluster: one per spec."""

    api_version: Literal["bke.bocloud.com/v1beta1"] = Field(description="The spec's format version.")
    kind: Literal["BKECluster"] = Field(description="The cluster document.")
    metadata: Metadata = Field(description="`name` is the cluster's name.")
    spec: BKEClusterSpec = Field(description="The cluster's endpoint, configuration and addons.")


class NodeComponentArgs(_Model):
    """Per-node override: merged over the cluster's extraArgs flag by flag."""

    extra_args: dict[str, str] = Field({}, description="Flags for the component on this node, merged over the "
                                                       "cluster's `extraArgs` flag by flag (this node's value wins).")


_NODE_ARGS = "Per-node {} flags, merged over the cluster's."


class BKENodeSpec(_Model):
    hostname: str = Field(description="The node's hostname (DNS-1123, unique in the spec).")
    ip: str = Field(description="The node's IP address (unique in the spec); `bke agent bootstrap` connects to it "
                                "over SSH.")
    port: int = Field(22, description="The SSH port `bke agent bootstrap` connects to.")
    username: str = Field("root", description="The SSH user of `bke agent bootstrap`; a user other than root "
                                              "installs through sudo.")
    # validate_spec refuses other roles, an empty list and a role listed twice: the schema says so
    # too, so that an editor flags them while the loader itself takes any string.
    role: list[str] = Field(description="What the node runs (at least one, each once): `master` (control plane), "
                                        "`node` (workloads), `master/node` (both), `etcd`, `etcd-event`, `etcd-pod` "
                                        "(a member of that etcd cluster), and on masters `apiserver`, "
                                        "`controller-manager`, `scheduler` to split the control plane.",
                            json_schema_extra={"items": {"enum": list(ROLES)}, "minItems": 1, "uniqueItems": True})
    # as Go and upstream downloads name it
    arch: Literal["amd64", "arm64"] = Field("amd64", description="The node's CPU architecture: which binaries it "
                                                                 "fetches.")
    labels: dict[str, str] = Field({}, description="Kubernetes labels for the node's Node object (they add to the "
                                                   "role labels, never replace them).")
    load_balancer: NodeLoadBalancer | None = Field(None, description="This master's keepalived settings.")
    api_server: NodeComponentArgs | None = Field(None, description=_NODE_ARGS.format("kube-apiserver"))
    controller_manager: NodeComponentArgs | None = Field(None, description=_NODE_ARGS.format("kube-controller-manager"))
    scheduler: NodeComponentArgs | None = Field(None, description=_NODE_ARGS.format("kube-scheduler"))
    etcd: NodeComponentArgs | None = Field(None, description=_NODE_ARGS.format("etcd (etcd-data)"))
    etcd_events: NodeComponentArgs | None = Field(None, description=_NODE_ARGS.format("events etcd"))
    etcd_pods: NodeComponentArgs | None = Field(None, description=_NODE_ARGS.format("pods etcd"))
    kubelet: NodeComponentArgs | None = Field(None, description=_NODE_ARGS.format("kubelet"))


class BKENode(_Model):
    """One node: one document per node."""

    api_version: Literal["bke.bocloud.com/v1beta1"] = Field(description="The spec's format version.")
    kind: Literal["BKENode"] = Field(description="A node document.")
    metadata: Metadata | None = Field(None, description="`name` names the document (unique among the nodes).")
    spec: BKENodeSpec = Field(description="The node's address, roles and overrides.")


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
