"""Where a real-control-plane lab puts its control-plane nodes: one network namespace each, on one
bridge, with addresses from 198.18.0.0/15 (RFC 2544's benchmarking range, used by no real network).

Why namespaces: on one kernel every lab node is a 127.x address, and VRRP cannot move a VIP
between addresses of one interface. A namespace gives a node its own interface, so Debian's
keepalived runs from the rendered keepalived.conf, holds the VIP on that interface and sends its
adverts to the other masters, as on real hosts; haproxy binds `*` as rendered.

What goes in a namespace: every node that runs an apiserver, a controller-manager, a scheduler,
haproxy, keepalived or an etcd member. They reach each other across the bridge; a process in a
namespace cannot reach the root namespace's 127.x addresses, so the apiserver and its etcd must
be on the same side. Everything else stays in the root namespace: the agents (and so their NATS
connections and the services), kwok and the tests. They reach node addresses and the VIP through
the bridge, which holds a root-side address of the nodes' /24; the addresses of nodes without a
namespace (workers) are on the bridge too (/32), and each namespace routes to them through it.

This module plans (pure); `bke.lab.netns_ops` makes it so with `ip`.
"""
from __future__ import annotations

import hashlib
import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bke.core.plan import Plan

__all__ = ["LAB_RANGE", "NAMESPACED", "LabNetwork", "LabNetworkError", "NetnsHost", "in_lab_range", "plan_lab_network"]

LAB_RANGE = ipaddress.ip_network("198.18.0.0/15")
# components whose node gets a namespace (etcd clusters are named etcd-data, etcd-events, ...)
NAMESPACED = frozenset({"kube-apiserver", "kube-controller-manager", "kube-scheduler", "haproxy", "keepalived"})
IFNAME = "eth0"  # the interface inside every namespace (keepalived.conf's `interface` is pointed at it)
SUBNET_PREFIX = 24


class LabNetworkError(ValueError):
    """The spec's addresses cannot be laid out on one bridge (the message names the field)."""


@dataclass(frozen=True)
class NetnsHost:
    hostname: str
    netns: str  # /run/netns/<netns>
    ip: str
    root_veth: str  # the veth's end on the bridge (root namespace)
    peer_veth: str  # its other end, before it moves into the namespace and becomes IFNAME
    ifname: str = IFNAME


@dataclass(frozen=True)
class LabNetwork:
    tag: str  # short, per work directory: several labs can run at once
    bridge: str
    gateway: str  # the bridge's own address (root namespace), with SUBNET_PREFIX
    prefix: int
    hosts: tuple[NetnsHost, ...]
    root_addresses: tuple[str, ...]  # nodes without a namespace: /32 on the bridge
    vip: str = ""

    def netns_of(self, hostname: str) -> str:
        return next((h.netns for h in self.hosts if h.hostname == hostname), "")

    def to_json(self) -> dict[str, Any]:
        return {"tag": self.tag, "bridge": self.bridge, "gateway": self.gateway, "prefix": self.prefix, "vip": self.vip,
                "rootAddresses": list(self.root_addresses),
                "hosts": [{"hostname": h.hostname, "netns": h.netns, "ip": h.ip, "rootVeth": h.root_veth,
                           "peerVeth": h.peer_veth, "ifname": h.ifname} for h in self.hosts]}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> "LabNetwork":
        hosts = tuple(NetnsHost(str(h["hostname"]), str(h["netns"]), str(h["ip"]), str(h["rootVeth"]),
                                str(h["peerVeth"]), str(h.get("ifname", IFNAME))) for h in doc["hosts"])
        return cls(str(doc["tag"]), str(doc["bridge"]), str(doc["gateway"]), int(doc["prefix"]), hosts,
                   tuple(str(a) for a in doc["rootAddresses"]), str(doc.get("vip", "")))


def in_lab_range(address: str) -> bool:
    try:
        return ipaddress.ip_address(address) in LAB_RANGE
    except ValueError:
        return False


def _tag(workdir: Path) -> str:
    return hashlib.sha256(str(workdir.resolve()).encode()).hexdigest()[:6]


def _namespaced(components: list[str]) -> bool:
    return any(c in NAMESPACED or c.startswith("etcd") for c in components)


def plan_lab_network(plan: Plan, workdir: Path) -> LabNetwork | None:
    """The namespaces, veths and bridge for this plan's lab; None when its nodes are not in
    198.18.0.0/15 (the loopback lab). LabNetworkError when some are and the layout is impossible."""
    inside = [n.ip for n in plan.nodes if in_lab_range(n.ip)]
    if not inside:
        return None
    where = {n.hostname: i for i, n in enumerate(plan.nodes)}
    outside = [n for n in plan.nodes if not in_lab_range(n.ip)]
    if outside:
        n = outside[0]
        raise LabNetworkError(f"nodes[{where[n.hostname]}].spec.ip: {n.ip} is not in {LAB_RANGE}, where this lab's "
                              f"other nodes are; a lab puts every node in 198.18.0.0/15 or none")
    cp = [n for n in plan.nodes if _namespaced(n.components)]
    if not cp:
        raise LabNetworkError("nodes: no node runs a control-plane component; nothing to put in a namespace")
    subnet = ipaddress.ip_network(f"{cp[0].ip}/{SUBNET_PREFIX}", strict=False)
    vip = plan.control_plane_endpoint.rpartition(":")[0].strip("[]") if plan.load_balancer else ""
    for n in cp:
        if ipaddress.ip_address(n.ip) not in subnet:
            raise LabNetworkError(f"nodes[{where[n.hostname]}].spec.ip: {n.ip} is not in {subnet}, the control plane's "
                                  f"subnet (the lab's bridge is one /{SUBNET_PREFIX})")
    if vip and ipaddress.ip_address(vip) not in subnet:
        raise LabNetworkError(f"cluster.spec.controlPlaneEndpoint: the VIP {vip} is not in {subnet}, where the masters "
                              "are; keepalived's adverts and gratuitous ARP stay on one link")
    taken = {n.ip for n in plan.nodes} | ({vip} if vip else set())
    gateway = next((str(a) for a in reversed(list(subnet.hosts())) if str(a) not in taken), None)
    if gateway is None:
        raise LabNetworkError(f"nodes: {subnet} has no address left for the lab's bridge")
    tag = _tag(workdir)
    hosts = tuple(NetnsHost(n.hostname, f"bke-{tag}-{n.hostname}", n.ip, f"bkv{tag}{i}", f"bkp{tag}{i}")
                  for i, n in enumerate(cp))
    if any(len(h.root_veth) > 15 for h in hosts):
        raise LabNetworkError(f"nodes: {len(cp)} control-plane nodes; interface names hold at most 15 characters")
    root = tuple(n.ip for n in plan.nodes if not _namespaced(n.components))
    return LabNetwork(tag, f"bkebr{tag}", gateway, SUBNET_PREFIX, hosts, root, vip)
