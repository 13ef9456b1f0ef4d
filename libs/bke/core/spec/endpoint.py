"""The control-plane endpoint and who serves it: a node, a VIP that BKE moves between the masters
with keepalived (haproxy in front of every kube-apiserver), or an external load balancer.

`serves_vip` is the one decision the planner and the validator share; `check_endpoint` returns
every problem with its field path and never raises.
"""
from __future__ import annotations

import ipaddress
import re

from bke.core.netaddr import is_ip
from .errors import FieldError
from .models import ClusterSpec
from .roles import is_master

__all__ = ["APISERVER_PORT", "check_endpoint", "load_balancer_nodes", "serves_vip"]

APISERVER_PORT = 6443
_EP = "cluster.spec.controlPlaneEndpoint"
_LB = "cluster.spec.clusterConfig.cluster.loadBalancer"
# Linux takes 1-15 bytes (IFNAMSIZ 16, net/core/dev.c dev_valid_name) without '/', ':' or
# whitespace; we also keep out what keepalived's config syntax would read as a quote, brace or
# comment, so a name is one plain word in keepalived.conf.
_CAMEL = {"virtual_router_id": "virtualRouterId"}
_IFNAME = re.compile(r"^[A-Za-z0-9_.@-]{1,15}$")


def serves_vip(spec: ClusterSpec) -> bool:
    """True when BKE runs keepalived + haproxy on the masters for the endpoint."""
    ep = spec.cluster.spec.control_plane_endpoint
    lb = spec.config.load_balancer
    return lb.type == "vip" and ep.host not in {n.spec.ip for n in spec.nodes}


def load_balancer_nodes(spec: ClusterSpec) -> list[int]:
    """Indexes of the nodes that run keepalived when the endpoint is a VIP: every master."""
    return [i for i, n in enumerate(spec.nodes) if is_master(n.spec.role)]


def _interface_error(path: str, name: str) -> FieldError | None:
    if _IFNAME.match(name) and name not in (".", ".."):
        return None
    return FieldError(path=path, message=f"{name!r} is not a network interface name (1-15 letters, digits, '_', '.', '@' or '-')")


def _node_endpoint(spec: ClusterSpec, i: int) -> list[FieldError]:
    ep = spec.cluster.spec.control_plane_endpoint
    node = spec.nodes[i]
    roles = node.spec.role
    split = any("apiserver" in n.spec.role for n in spec.nodes)
    if not (is_master(roles) and (not split or "apiserver" in roles)):
        return [FieldError(path=f"{_EP}.host", message=f"{ep.host} is nodes[{i}] ({node.spec.hostname}), which runs no kube-apiserver")]
    if ep.port != APISERVER_PORT:
        return [FieldError(path=f"{_EP}.port", message=f"the endpoint is a node address, where kube-apiserver listens on {APISERVER_PORT}, not {ep.port}; use a VIP for another port")]
    return []


def _vip(spec: ClusterSpec) -> list[FieldError]:
    ep = spec.cluster.spec.control_plane_endpoint
    lb = spec.config.load_balancer
    errs = []
    if not is_ip(ep.host):
        return [FieldError(path=f"{_EP}.host", message=f"{ep.host!r} is no node's address, so it would be a VIP that keepalived moves between the masters, and a VIP is an IP address; for a load balancer BKE does not run (a cloud's, reached by DNS name) set {_LB}.type: external")]
    if ep.port == APISERVER_PORT:
        errs.append(FieldError(path=f"{_EP}.port", message=f"a VIP endpoint is served by haproxy on the masters, where kube-apiserver already listens on {APISERVER_PORT}; choose another port (e.g. 36443)"))
    if err := _interface_error(f"{_LB}.interface", lb.interface):
        errs.append(err)
    vip_family = ipaddress.ip_address(ep.host).version
    for i in load_balancer_nodes(spec):
        n = spec.nodes[i].spec
        if n.load_balancer and n.load_balancer.interface is not None and (err := _interface_error(f"nodes[{i}].spec.loadBalancer.interface", n.load_balancer.interface)):
            errs.append(err)
        # Unicast adverts go from each master's address to the others': one address family with
        # the VIP's, since the instance's family follows its VIPs (keepalived.conf(5), unicast_peer).
        if lb.vrrp == "unicast" and is_ip(n.ip) and ipaddress.ip_address(n.ip).version != vip_family:
            errs.append(FieldError(path=f"nodes[{i}].spec.ip", message=f"{n.ip} is not IPv{vip_family} like the VIP {ep.host}; unicast VRRP sends from each master's address, so use an IPv{vip_family} node address or {_LB}.vrrp: multicast"))
    return errs


def check_endpoint(spec: ClusterSpec, warnings: list[str]) -> list[FieldError]:
    """The endpoint is a node running kube-apiserver on 6443, a VIP served by haproxy on another
    port, or (loadBalancer.type external) a load balancer that is none of the nodes."""
    ep = spec.cluster.spec.control_plane_endpoint
    lb = spec.config.load_balancer
    by_ip = {n.spec.ip: i for i, n in enumerate(spec.nodes)}
    if lb.type == "external" and ep.host in by_ip:
        i = by_ip[ep.host]
        return [FieldError(path=f"{_LB}.type", message=f"external, but the endpoint {ep.host} is nodes[{i}] ({spec.nodes[i].spec.hostname}); an external load balancer is not one of the nodes")]
    errs = _node_endpoint(spec, by_ip[ep.host]) if ep.host in by_ip else _vip(spec) if lb.type == "vip" else []
    vip, lb_nodes = serves_vip(spec), set(load_balancer_nodes(spec))
    if not vip:
        for field in sorted(lb.model_fields_set - {"type"}):
            warnings.append(f"{_LB}.{_CAMEL.get(field, field)} is ignored: BKE runs no keepalived for this endpoint")
    for i, n in enumerate(spec.nodes):
        if n.spec.load_balancer and n.spec.load_balancer.interface is not None and not (vip and i in lb_nodes):
            why = "the endpoint is no VIP" if i in lb_nodes else "the node is not a master"
            warnings.append(f"nodes[{i}].spec.loadBalancer.interface is ignored: no keepalived runs there ({why})")
    return errs
