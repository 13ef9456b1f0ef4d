"""The placement plan: what runs where. Read by certs, renderer and dispatcher.

This is a versioned contract (`schemaVersion`), serialised camelCase. It embeds the
normalised spec so that a consumer needs nothing but the plan.
"""
from __future__ import annotations

from functools import cached_property
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from bke.core.spec.models import ClusterSpec

__all__ = [
    "COMPONENTS",
    "ETCD_CLUSTERS",
    "ApiserverEtcd",
    "EtcdClusterPlan",
    "EtcdMember",
    "NodePlan",
    "Plan",
    "Taint",
    "quorum",
]

# Canonical component names, in the order they are listed on a node.
COMPONENTS = (
    "containerd",
    "kubelet",
    "etcd-data",
    "etcd-events",
    "etcd-pods",
    "haproxy",
    "keepalived",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kube-proxy",
)
ETCD_CLUSTERS = ("etcd-data", "etcd-events", "etcd-pods")


def quorum(members: int) -> int:
    """Voting members an etcd cluster of `members` needs up (raft: a strict majority)."""
    return members // 2 + 1


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True)

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True)


class Taint(_Model):
    key: str
    value: str = ""
    effect: str


class NodePlan(_Model):
    hostname: str
    ip: str
    roles: list[str]
    components: list[str]
    labels: dict[str, str]
    taints: list[Taint]
    registers: bool  # False for etcd-only nodes: standalone kubelet, no Node object
    # The node's CPU architecture (BKENode spec.arch): which binaries it fetches. Defaulted so
    # that a plan stored before the field existed still parses.
    arch: Literal["amd64", "arm64"] = "amd64"

    def runs(self, component: str) -> bool:
        return component in self.components


class EtcdMember(_Model):
    hostname: str
    ip: str
    # The plan's JSON contract spells these with "URL" (clientURL), like Kubernetes fields.
    client_url: str = Field(alias="clientURL")
    peer_url: str = Field(alias="peerURL")
    metrics_url: str = Field(alias="metricsURL")


class EtcdClusterPlan(_Model):
    name: str
    client_port: int
    peer_port: int
    metrics_port: int
    data_dir: str
    cert_dir: str  # on the node, e.g. /etc/kubernetes/pki/etcd-events
    manifest: str  # static pod file name, e.g. etcd-events.yaml
    resources: list[str]
    members: list[EtcdMember]

    @property
    def initial_cluster(self) -> str:
        return ",".join(f"{m.hostname}={m.peer_url}" for m in self.members)

    def member(self, hostname: str) -> EtcdMember | None:
        return next((m for m in self.members if m.hostname == hostname), None)


class ApiserverEtcd(_Model):
    etcd_servers: str
    etcd_servers_overrides: str  # "" when etcd is not split


class Plan(_Model):
    schema_version: int = 1
    cluster: str
    kubernetes_version: str
    etcd_version: str
    containerd_version: str
    control_plane_endpoint: str  # host:port
    load_balancer: bool  # endpoint host is a VIP: haproxy + keepalived on the masters
    nodes: list[NodePlan]
    etcd_clusters: list[EtcdClusterPlan]
    apiserver: ApiserverEtcd
    warnings: list[str] = []
    spec: ClusterSpec

    def node(self, hostname: str) -> NodePlan:
        nodes, index = self.node_index
        if nodes is not self.nodes:  # a model_copy(update={"nodes": ...}) carries the old cache along
            del self.__dict__["node_index"]
            nodes, index = self.node_index
        return index[hostname]

    @cached_property
    def node_index(self) -> tuple[list[NodePlan], dict[str, NodePlan]]:
        """The nodes by hostname (and the list it was made from), made once: the upgrader and the
        dispatcher look up every node of a 5,000-node plan in turn, which a scan made quadratic.
        Not a field: neither dumped nor compared."""
        return self.nodes, {n.hostname: n for n in self.nodes}

    def etcd_cluster(self, name: str) -> EtcdClusterPlan | None:
        return next((c for c in self.etcd_clusters if c.name == name), None)

    def nodes_running(self, component: str) -> list[NodePlan]:
        return [n for n in self.nodes if component in n.components]

    def public_view(self) -> dict:
        """The `bke plan -o json` document: the plan without the embedded spec."""
        return self.model_dump(by_alias=True, mode="json", exclude={"spec"})
