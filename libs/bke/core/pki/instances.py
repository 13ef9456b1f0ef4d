"""From a plan and the table to concrete instances and per-node file sets. Pure.

An *instance* is one issued thing: a cluster-wide row (``ca``, ``sa``) or a per-node row for one
node (``apiserver@m1``, ``kubelet.conf@worker7``). Its id is the store key and what
``bke certs renew`` accepts besides a row name.
"""
from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from bke.core.plan import NodePlan, Plan
from bke.core.spec.roles import is_master
from bke.core.spec.validate import APISERVER_PORT
from .table import CERTS, CertSpec, Place

__all__ = [
    "FileRef",
    "Instance",
    "MODE_PRIVATE",
    "MODE_PUBLIC",
    "desired_instances",
    "instance_id",
    "node_file_refs",
    "node_matches",
    "node_traits",
    "nodes_by_instance",
    "split_instance_id",
]

MODE_PUBLIC = 0o644
MODE_PRIVATE = 0o600


@dataclass(frozen=True, slots=True)
class Instance:
    """What an instance must look like according to the plan (the ensure step compares to it)."""

    id: str
    spec: CertSpec
    owner: str | None
    cn: str
    o: tuple[str, ...]
    dns: tuple[str, ...]
    ips: tuple[str, ...]  # normalised text form (ipaddress' str)
    server: str | None = None  # kubeconfig rows only


@dataclass(frozen=True, slots=True)
class FileRef:
    """One file on one node: where, with which mode, and which part of which instance.

    ``part`` is ``cert`` (certificate PEM), ``key`` (private key PEM), ``pub`` (public key PEM,
    for sa.pub) or ``kubeconfig`` (rendered with the client cert and key embedded).
    """

    path: str
    mode: int
    instance: str
    part: str

    @property
    def secret(self) -> bool:
        return self.part in ("key", "kubeconfig")


def instance_id(name: str, owner: str | None) -> str:
    return f"{name}@{owner}" if owner else name


def split_instance_id(iid: str) -> tuple[str, str | None]:
    name, sep, owner = iid.partition("@")
    return name, (owner if sep else None)


def node_traits(node: NodePlan) -> frozenset[str]:
    """Every placement word (see table.py) that selects ``node``, except ``owner``."""
    traits = {"all", *node.components}
    if is_master(node.roles):
        traits.add("master")
    if node.registers:
        traits.add("registers")
    return frozenset(traits)


def node_matches(where: str, node: NodePlan, owner: str | None = None) -> bool:
    """The placement predicate of the table (see table.py)."""
    if where == "owner":
        return node.hostname == owner
    return where in node_traits(node)


def _row_active(spec: CertSpec, etcd_names: set[str]) -> bool:
    return spec.etcd is None or spec.etcd in etcd_names


def _url(host: str, port: int | str) -> str:
    try:
        if ipaddress.ip_address(host).version == 6:
            host = f"[{host}]"
    except ValueError:
        pass
    return f"https://{host}:{port}"


def _ip_or_none(text: str) -> str | None:
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None


def _dedup(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


class _Context:
    """Per-plan values every instance needs, computed once (5,000-node plans are common)."""

    def __init__(self, plan: Plan) -> None:
        c = plan.spec.config
        host, _, port = plan.control_plane_endpoint.rpartition(":")
        self.endpoint_host = host.strip("[]")
        self.endpoint_url = _url(self.endpoint_host, port)
        svc = ipaddress.ip_network(c.networking.service_subnet, strict=False)
        domain = c.networking.dns_domain
        dns = ["kubernetes", "kubernetes.default", "kubernetes.default.svc", f"kubernetes.default.svc.{domain}"]
        ips = [str(svc.network_address + 1)]
        endpoint_ip = _ip_or_none(self.endpoint_host)
        (ips if endpoint_ip else dns).append(endpoint_ip or self.endpoint_host)
        ips.append("127.0.0.1")
        for san in c.api_server.cert_sans:
            ip = _ip_or_none(san)
            (ips if ip else dns).append(ip or san)
        self.apiserver_dns, self.apiserver_ips = dns, ips
        self.etcd_names = {e.name for e in plan.etcd_clusters}

    def sans(self, spec: CertSpec, node: NodePlan | None, cn: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        if spec.sans == "ca":
            return (cn,), ()
        if spec.sans == "apiserver" and node is not None:
            return _dedup([node.hostname, *self.apiserver_dns]), _dedup([str(ipaddress.ip_address(node.ip)), *self.apiserver_ips])
        if spec.sans == "etcd-member" and node is not None:
            return _dedup([node.hostname, "localhost"]), _dedup([str(ipaddress.ip_address(node.ip)), "127.0.0.1", "::1"])
        return (), ()

    def server(self, spec: CertSpec, node: NodePlan | None) -> str | None:
        if spec.kind != "kubeconfig":
            return None
        if spec.server == "local" and node is not None and node.runs("kube-apiserver"):
            return _url(node.ip, APISERVER_PORT)
        return self.endpoint_url


def _selected(plan: Plan, hosts: Iterable[str] | None) -> list[NodePlan]:
    """The plan's nodes named in `hosts` (None: all), in plan order. One node is looked up, not
    scanned for: its bundle and each of its static pods' certificate names (bke.core.pki.pod_certs,
    every master's render) ask for one node, and a scan of a 10,000-node plan each time made a
    render of many masters quadratic."""
    if hosts is None:
        return list(plan.nodes)
    wanted = set(hosts)
    if len(wanted) == 1:
        try:
            return [plan.node(next(iter(wanted)))]
        except KeyError:
            return []
    return [n for n in plan.nodes if n.hostname in wanted]


def desired_instances(plan: Plan, hosts: Iterable[str] | None = None, *,
                      kubernetes: str | None = None) -> list[Instance]:
    """Every instance the plan needs, CA rows first (table order, then node order).

    ``hosts`` restricts per-node rows to those nodes (cluster rows are always included): what one
    node's bundle needs, without building 5,000 nodes' instances. Subjects are those kubeadm of
    the plan's Kubernetes release issues (bke.core.pki.subjects), or of ``kubernetes`` when given.
    """
    ctx = _Context(plan)
    release = kubernetes or plan.kubernetes_version
    with_trait: dict[str, list[NodePlan]] = {}  # placement word -> its nodes, in plan order
    for node in _selected(plan, hosts):
        for trait in node_traits(node):
            with_trait.setdefault(trait, []).append(node)
    out: list[Instance] = []
    for spec in CERTS:
        if not _row_active(spec, ctx.etcd_names):
            continue
        o = spec.o_for(release)
        if spec.per == "cluster":
            dns, ips = ctx.sans(spec, None, spec.cn)
            out.append(Instance(spec.name, spec, None, spec.cn, o, dns, ips, ctx.server(spec, None)))
            continue
        templated = "{hostname}" in spec.cn
        for node in with_trait.get(spec.needs, ()):
            cn = spec.cn.replace("{hostname}", node.hostname) if templated else spec.cn
            dns, ips = ctx.sans(spec, node, cn)
            out.append(Instance(instance_id(spec.name, node.hostname), spec, node.hostname, cn, o,
                                dns, ips, ctx.server(spec, node)))
    return out


def _places(spec: CertSpec) -> Iterable[tuple[Place, str]]:
    for place in spec.cert:
        yield place, "kubeconfig" if spec.kind == "kubeconfig" else ("pub" if spec.kind == "keypair" else "cert")
    for place in spec.key:
        yield place, "key"


def _file_template(rows: list[tuple[CertSpec, list[tuple[Place, str]]]],
                   traits: frozenset[str]) -> list[tuple[FileRef, bool]]:
    """The files of any node with these traits, sorted; (ref, per_node) with per-node refs
    carrying the bare row name as instance (filled in per node)."""
    files: dict[str, tuple[FileRef, bool]] = {}
    for spec, places in rows:
        per_node = spec.per == "node"
        if per_node and spec.needs not in traits:
            continue
        for place, part in places:
            if not per_node and place.where not in traits:
                continue
            mode = MODE_PUBLIC if part in ("cert", "pub") else MODE_PRIVATE
            ref, _ = files.setdefault(place.path, (FileRef(place.path, mode, spec.name, part), per_node))
            if ref.instance != spec.name or ref.part != part:  # a table bug, caught by the table tests
                raise AssertionError(f"{place.path} claimed by {ref.instance} and {spec.name}")
    return [files[p] for p in sorted(files)]


def node_file_refs(plan: Plan, hosts: Iterable[str] | None = None) -> dict[str, list[FileRef]]:
    """Each node's files (sorted by path), from the table's placement rules: least privilege.

    Nodes with the same traits share one template (a 5,000-node plan has a handful of kinds of
    node), and cluster-wide files are the same FileRef object on every node.
    """
    etcd_names = {e.name for e in plan.etcd_clusters}
    rows = [(spec, list(_places(spec))) for spec in CERTS if _row_active(spec, etcd_names)]
    templates: dict[frozenset[str], list[tuple[FileRef, bool]]] = {}
    out: dict[str, list[FileRef]] = {}
    for node in _selected(plan, hosts):
        traits = node_traits(node)
        template = templates.get(traits)
        if template is None:
            template = templates[traits] = _file_template(rows, traits)
        host = node.hostname
        out[host] = [FileRef(ref.path, ref.mode, f"{ref.instance}@{host}", ref.part) if per_node else ref
                     for ref, per_node in template]
    return out


def nodes_by_instance(files: Mapping[str, list[FileRef]]) -> dict[str, list[str]]:
    """Inverse view: instance id -> hostnames holding any of its files (node order kept)."""
    out: dict[str, list[str]] = {}
    for host, refs in files.items():
        for ref in refs:
            hosts = out.setdefault(ref.instance, [])
            if not hosts or hosts[-1] != host:
                hosts.append(host)
    return out
