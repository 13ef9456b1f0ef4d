"""Placement: a validated spec in, a plan out. Pure: no I/O, no clock, no logging.

Rules:
- kube-apiserver / -controller-manager / -scheduler run on the masters that carry the
  matching optional role if any node carries it, else on every master;
- etcd-data runs on the nodes with role `etcd` if any, else on every master;
- etcd-events / etcd-pods exist only if some node carries `etcd-event` / `etcd-pod`, and
  the apiserver then routes their resources there with --etcd-servers-overrides.
"""
from __future__ import annotations

import ipaddress

from bke.core.spec.endpoint import serves_vip
from bke.core.spec.models import BKENode, ClusterSpec
from bke.core.spec.roles import CONTROL_PLANE_ROLES, ETCD_ROLES, is_master, is_worker, registers
from .models import COMPONENTS, ApiserverEtcd, EtcdClusterPlan, EtcdMember, NodePlan, Plan, Taint

__all__ = ["ETCD_LAYOUT", "EtcdLayout", "build_plan", "format_overrides", "parse_overrides"]


class EtcdLayout:
    """Ports, folders and routed resources of one etcd cluster (a row of ETCD_LAYOUT)."""

    def __init__(self, name: str, client: int, peer: int, metrics: int, suffix: str, resources: list[str]) -> None:
        self.name, self.client, self.peer, self.metrics = name, client, peer, metrics
        self.suffix, self.resources = suffix, resources

    @property
    def cert_dir(self) -> str:
        return "/etc/kubernetes/pki/etcd" + self.suffix

    @property
    def manifest(self) -> str:
        return f"etcd{self.suffix}.yaml"


# Distinct ports per cluster so that clusters can share a node.
ETCD_LAYOUT = {
    "etcd-data": EtcdLayout("etcd-data", 2379, 2380, 2381, "", ["*"]),
    "etcd-events": EtcdLayout("etcd-events", 2383, 2382, 2384, "-events", ["/events", "coordination.k8s.io/leases"]),
    "etcd-pods": EtcdLayout("etcd-pods", 2385, 2386, 2387, "-pods", ["/pods"]),
}

LABEL_CONTROL_PLANE = ("node-role.kubernetes.io/control-plane", "control-plane")
LABEL_MASTER = ("node-role.kubernetes.io/master", "")
LABEL_WORKER = ("node-role.kubernetes.io/worker", "worker")
LABEL_NODE = ("node-role.kubernetes.io/node", "")
# Large-cluster roles are shown in `kubectl get nodes` ROLES like the seed's own roles.
SPLIT_ROLE_LABELS = ("apiserver", "controller-manager", "scheduler", "etcd-event", "etcd-pod")


def _url(ip: str, port: int, scheme: str = "https") -> str:
    host = f"[{ip}]" if ipaddress.ip_address(ip).version == 6 else ip
    return f"{scheme}://{host}:{port}"


def _members_by_cluster(nodes: list[BKENode]) -> dict[str, list[BKENode]]:
    out = {name: [n for n in nodes if role in n.spec.role] for role, name in ETCD_ROLES.items()}
    if not out["etcd-data"]:
        out["etcd-data"] = [n for n in nodes if is_master(n.spec.role)]
    return out


def _control_plane_hosts(nodes: list[BKENode]) -> dict[str, set[str]]:
    masters = [n for n in nodes if is_master(n.spec.role)]
    out = {}
    for role, component in CONTROL_PLANE_ROLES.items():
        chosen = [n for n in masters if role in n.spec.role]
        out[component] = {n.spec.hostname for n in (chosen or masters)}
    return out


def format_overrides(clusters: list[EtcdClusterPlan]) -> str:
    """Upstream syntax: `group/resource#url;url,...`, core group as a leading `/`."""
    entries = []
    for c in clusters:
        if c.name == "etcd-data":
            continue
        urls = ";".join(m.client_url for m in c.members)
        entries += [f"{res}#{urls}" for res in c.resources]
    return ",".join(entries)


def parse_overrides(value: str) -> dict[str, list[str]]:
    """Inverse of format_overrides; raises ValueError on a malformed entry."""
    out: dict[str, list[str]] = {}
    if not value:
        return out
    for entry in value.split(","):
        resource, sep, urls = entry.partition("#")
        if not sep or "/" not in resource or not urls:
            raise ValueError(f"malformed --etcd-servers-overrides entry {entry!r}")
        out[resource] = urls.split(";")
    return out


def build_plan(spec: ClusterSpec, warnings: list[str] | None = None) -> Plan:
    """Place every component. The spec must already have passed `validate_spec`."""
    c = spec.config
    ep = spec.cluster.spec.control_plane_endpoint
    vip = serves_vip(spec)
    members = _members_by_cluster(spec.nodes)
    etcd_clusters = [_etcd_cluster(name, layout, members[name], c.etcd.data_dir)
                     for name, layout in ETCD_LAYOUT.items() if members[name]]
    etcd_of = {name: {n.spec.hostname for n in ms} for name, ms in members.items()}
    cp_hosts = _control_plane_hosts(spec.nodes)
    data = next(cl for cl in etcd_clusters if cl.name == "etcd-data")
    return Plan(
        cluster=spec.name,
        kubernetes_version=c.kubernetes_version,
        etcd_version=c.etcd_version,
        containerd_version=c.containerd_version,
        control_plane_endpoint=f"{ep.host}:{ep.port}",
        load_balancer=vip,
        nodes=[_node_plan(n, etcd_of, cp_hosts, vip) for n in spec.nodes],
        etcd_clusters=etcd_clusters,
        apiserver=ApiserverEtcd(
            etcd_servers=",".join(m.client_url for m in data.members),
            etcd_servers_overrides=format_overrides(etcd_clusters),
        ),
        warnings=list(warnings or []),
        spec=spec,
    )


def _etcd_cluster(name: str, layout: EtcdLayout, members: list[BKENode], data_dir: str) -> EtcdClusterPlan:
    """One etcd cluster of ETCD_LAYOUT on its members: its ports, folders and member URLs."""
    return EtcdClusterPlan(
        name=name,
        client_port=layout.client,
        peer_port=layout.peer,
        metrics_port=layout.metrics,
        data_dir=data_dir.rstrip("/") + layout.suffix,
        cert_dir=layout.cert_dir,
        manifest=layout.manifest,
        resources=list(layout.resources),
        members=[
            EtcdMember(
                hostname=n.spec.hostname,
                ip=n.spec.ip,
                client_url=_url(n.spec.ip, layout.client),
                peer_url=_url(n.spec.ip, layout.peer),
                metrics_url=_url(n.spec.ip, layout.metrics, "http"),
            )
            for n in members
        ],
    )


def _node_plan(n: BKENode, etcd_of: dict[str, set[str]], cp_hosts: dict[str, set[str]], vip: bool) -> NodePlan:
    """One node's components (in COMPONENTS order), labels and taints."""
    roles = n.spec.role
    h = n.spec.hostname
    placed = {"containerd", "kubelet"}
    placed |= {name for name, hosts in etcd_of.items() if h in hosts}
    if is_master(roles):
        placed |= {comp for comp, hosts in cp_hosts.items() if h in hosts}
        if vip:
            placed |= {"haproxy", "keepalived"}
    if registers(roles):
        placed.add("kube-proxy")
    return NodePlan(
        hostname=h,
        ip=n.spec.ip,
        roles=list(roles),
        components=[comp for comp in COMPONENTS if comp in placed],
        labels=_labels(n),
        taints=_taints(roles),
        registers=registers(roles),
        arch=n.spec.arch,
    )


def _labels(n: BKENode) -> dict[str, str]:
    roles = n.spec.role
    if not registers(roles):
        return {}  # etcd-only nodes never become Node objects
    labels: dict[str, str] = {}
    if is_master(roles):
        labels.update([LABEL_CONTROL_PLANE, LABEL_MASTER])
    if is_worker(roles):
        labels.update([LABEL_WORKER, LABEL_NODE])
    for role in SPLIT_ROLE_LABELS:
        if role in roles:
            labels[f"node-role.kubernetes.io/{role}"] = ""
    for k, v in n.spec.labels.items():
        labels.setdefault(k, v)  # user labels may add, never relabel a role
    return dict(sorted(labels.items()))


def _taints(roles: list[str]) -> list[Taint]:
    if is_master(roles) and not is_worker(roles):
        return [Taint(key="node-role.kubernetes.io/control-plane", effect="NoSchedule")]
    return []
