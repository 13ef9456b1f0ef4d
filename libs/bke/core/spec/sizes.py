"""Address-space sizes checked at plan time, with the arithmetic in every message.

Three limits, each as upstream computes it (sources beside the constants):

- calico's IPAM hands each node at least one block of /26 (IPv4) or /122 (IPv6) carved out of
  its pool, which BKE sets to podSubnet (one pool per family of a dual-stack pair, each checked):
  2^(block - prefix) blocks, one per registered node at least. (Calico can lend addresses from other nodes' blocks when none is left, unless
  strictAffinity is on; BKE does not plan on borrowing: every node gets its own block.)
- the controller-manager, which BKE runs with --allocate-node-cidrs=true, gives each node one
  CIDR of --node-cidr-mask-size from --cluster-cidr (podSubnet): 2^(mask - prefix) node CIDRs
  (a dual-stack pair: one of each family per node, --node-cidr-mask-size-ipv4/-ipv6).
- the service subnet holds the built-in service IPs (index 1: the kubernetes service; index 10:
  cluster DNS, as kubeadm picks it) and is no larger than kube-apiserver accepts.

Within 20% of a limit is a warning, over it an error. Pure: no I/O.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from .errors import FieldError
from .models import ClusterSpec
from .pod_subnets import parse_pod_subnets
from .roles import is_master, registers

__all__ = [
    "CALICO_BLOCK",
    "NODE_CIDR_MASK_DEFAULT",
    "SERVICE_MAX_HOST_BITS",
    "WARN_FRACTION",
    "check_sizes",
]

_C = "cluster.spec.clusterConfig.cluster"
# calico's default IPAM block sizes (IPPoolSpec.BlockSize: "Defaults to 26 for IPv4 and 122 for IPv6";
# projectcalico/calico api/pkg/apis/projectcalico/v3/ippool.go). The addons phase writes each
# family's pool CIDR and CALICO_IPV4POOL_BLOCK_SIZE / CALICO_IPV6POOL_BLOCK_SIZE =
# bke.core.calico.BLOCK_SIZE into calico's manifest; a test holds the two equal.
CALICO_BLOCK = {4: 26, 6: 122}
# kube-controller-manager --node-cidr-mask-size defaults: 24 for IPv4, 64 for IPv6
# (kubernetes cmd/kube-controller-manager/app/options/nodeipamcontroller.go and
# pkg/controller/nodeipam/config/v1alpha1/defaults.go on release-1.31 .. release-1.35).
NODE_CIDR_MASK_DEFAULT = {4: 24, 6: 64}
# The node-CIDR allocator keeps one bit per node CIDR; for IPv6 the node mask may be at most
# 16 bits longer than the cluster CIDR's (kubernetes pkg/controller/nodeipam/ipam/cidrset/
# cidr_set.go, clusterSubnetMaxDiff = 16, IPv6 only; IPv4 has no such cap).
IPV6_NODE_MASK_MAX_DIFF = 16
# kube-apiserver refuses a --service-cluster-ip-range with more than 20 host bits ("specified
# --service-cluster-ip-range is too large; for 32-bit addresses, the mask must be >= 12"):
# kubernetes cmd/kube-apiserver/app/options/validation.go validateClusterIPFlags, maxCIDRBits =
# 20, on every release branch 1.31 .. 1.35. (The IPAddress allocator skips that check only when
# both MultiCIDRServiceAllocator and DisableAllocatorDualWrite are on; BKE sets neither, so the
# cap holds for every supported minor.)
SERVICE_MAX_HOST_BITS = 20
# The highest built-in service IP index: 10, the cluster DNS address kubeadm picks
# (kubeadm cmd/kubeadm/app/constants GetDNSIP: the 10th address of the service subnet).
DNS_INDEX = 10
WARN_FRACTION = 0.8  # warn from 80% of a limit: "within 20%"


@dataclass(frozen=True)
class _Limit:
    what: str
    capacity: int
    arithmetic: str


def check_sizes(spec: ClusterSpec) -> tuple[list[FieldError], list[str]]:
    """(errors, warnings) of the address-space sizes; a malformed subnet is skipped here (its own
    check in validate.py already reports it)."""
    errors: list[FieldError] = []
    warnings: list[str] = []
    net = spec.config.networking
    nodes = sum(1 for n in spec.nodes if registers(n.spec.role))
    try:
        pods = parse_pod_subnets(net.pod_subnet)
    except ValueError:
        pods = []  # reported by validate.py
    path = f"{_C}.networking.podSubnet"
    if len(pods) == 2:
        errors += _dual_stack_mask_errors(spec)
    for pod in pods:
        for limit in _pod_limits(spec, pod, dual=len(pods) == 2):
            if nodes > limit.capacity:
                errors.append(FieldError(path=path, message=f"{nodes} registered nodes do not fit: {limit.what}: {limit.arithmetic} = {limit.capacity:,}; each node needs one"))
            elif nodes >= WARN_FRACTION * limit.capacity:
                warnings.append(f"{path}: {nodes} registered nodes use {nodes / limit.capacity:.0%} of {limit.what} ({limit.arithmetic} = {limit.capacity:,}); room for {limit.capacity - nodes} more")
        errors += _ipv6_mask_diff(spec, pod, dual=len(pods) == 2)
    svc = _network(net.service_subnet)
    if svc is not None:
        errors += _service_errors(svc)
    return errors, warnings


def _network(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    try:
        return ipaddress.ip_network(text, strict=True)
    except ValueError:
        return None


def _pod_limits(spec: ClusterSpec, pod: ipaddress.IPv4Network | ipaddress.IPv6Network, dual: bool = False) -> list[_Limit]:
    out: list[_Limit] = []
    prefix = pod.prefixlen
    if spec.config.cni == "calico":
        block = CALICO_BLOCK[pod.version]
        out.append(_Limit(f"calico's /{block} IPAM blocks in pool {pod}", _count(block, prefix), f"2^({block}-{prefix})"))
    for mask, source in _node_masks(spec, pod.version, dual):
        out.append(_Limit(f"/{mask} node CIDRs the controller-manager allocates from {pod} ({source})", _count(mask, prefix), f"2^({mask}-{prefix})"))
    return out


def _count(mask: int, prefix: int) -> int:
    return 2 ** (mask - prefix) if mask >= prefix else 0


def _layers(spec: ClusterSpec) -> list[tuple[dict[str, str], str]]:
    """Each controller-manager's flags as it would read them (cluster extraArgs, then a master's own)."""
    cluster_args = dict(spec.config.controller_manager.extra_args)
    layers = [(cluster_args, f"{_C}.controllerManager.extraArgs")]
    for i, n in enumerate(spec.nodes):
        if is_master(n.spec.role) and n.spec.controller_manager is not None and n.spec.controller_manager.extra_args:
            layers.append(({**cluster_args, **n.spec.controller_manager.extra_args}, f"nodes[{i}].spec.controllerManager.extraArgs"))
    return layers


def _dual_stack_mask_errors(spec: ClusterSpec) -> list[FieldError]:
    """A dual-stack --cluster-cidr with --node-cidr-mask-size: the controller-manager refuses to
    start ("usage of --node-cidr-mask-size is not allowed with dual-stack clusters", kubernetes
    cmd/kube-controller-manager/app/core.go setNodeCIDRMaskSizes): the per-family flags only."""
    out = []
    for args, where in _layers(spec):
        if "node-cidr-mask-size" in args:
            out.append(FieldError(path=f"{where}.node-cidr-mask-size", message=(
                "not allowed with a dual-stack podSubnet (the controller-manager refuses to start): use "
                "node-cidr-mask-size-ipv4 and node-cidr-mask-size-ipv6")))
            break
    return out


def _node_masks(spec: ClusterSpec, family: int, dual: bool = False) -> list[tuple[int, str]]:
    """The node-CIDR mask of every controller-manager that may lead, as each would read its
    flags (cluster extraArgs, then that master's own); none when a user turned allocation off.
    Dual stack: the per-family flag only (the generic one is refused, _dual_stack_mask_errors)."""
    family_key = "node-cidr-mask-size-ipv4" if family == 4 else "node-cidr-mask-size-ipv6"
    keys = (family_key,) if dual else (family_key, "node-cidr-mask-size")
    found: dict[int, str] = {}
    for args, where in _layers(spec):
        if args.get("allocate-node-cidrs", "true").lower() in ("false", "0", "f"):
            continue
        key = next((k for k in keys if k in args), None)
        if key is None:
            found.setdefault(NODE_CIDR_MASK_DEFAULT[family], "--node-cidr-mask-size default")
            continue
        try:
            found.setdefault(int(args[key]), f"{where}.{key}")
        except ValueError:
            continue  # not a number: the controller-manager refuses it; not a size question
    return sorted(found.items())


def _ipv6_mask_diff(spec: ClusterSpec, pod: ipaddress.IPv4Network | ipaddress.IPv6Network,
                    dual: bool = False) -> list[FieldError]:
    if pod.version != 6:
        return []
    out = []
    for mask, source in _node_masks(spec, 6, dual):
        if mask - pod.prefixlen > IPV6_NODE_MASK_MAX_DIFF:
            out.append(FieldError(path=f"{_C}.networking.podSubnet", message=(
                f"the controller-manager refuses node CIDRs /{mask} ({source}) from {pod}: for IPv6 the node mask may be "
                f"at most {IPV6_NODE_MASK_MAX_DIFF} bits longer than the pod subnet's ({mask}-{pod.prefixlen} = {mask - pod.prefixlen}); "
                f"use a /{mask - IPV6_NODE_MASK_MAX_DIFF} or larger")))
    return out


def _service_errors(svc: ipaddress.IPv4Network | ipaddress.IPv6Network) -> list[FieldError]:
    path = f"{_C}.networking.serviceSubnet"
    bits = svc.max_prefixlen
    host_bits = bits - svc.prefixlen
    if host_bits > SERVICE_MAX_HOST_BITS:
        return [FieldError(path=path, message=(
            f"{svc} is larger than kube-apiserver accepts: {host_bits} host bits ({bits}-{svc.prefixlen}) > {SERVICE_MAX_HOST_BITS}; "
            f"for {bits}-bit addresses the mask must be >= {bits - SERVICE_MAX_HOST_BITS}"))]
    # IPv4 loses the network and broadcast addresses; IPv6 only the network (subnet-router) one.
    last_usable = svc.num_addresses - (2 if svc.version == 4 else 1)
    if DNS_INDEX > last_usable:
        smallest = bits - (DNS_INDEX + (2 if svc.version == 4 else 1) - 1).bit_length()
        return [FieldError(path=path, message=(
            f"{svc} holds {svc.num_addresses} addresses (2^{host_bits}), too few for the built-in services: the kubernetes "
            f"service takes index 1 and cluster DNS index {DNS_INDEX}; use a /{smallest} or larger"))]
    return []
