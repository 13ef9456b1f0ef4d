"""The pod subnet field: one CIDR, or a dual-stack pair "IPv4,IPv6", as kubeadm spells it.

kubeadm's ClusterConfiguration `networking.podSubnet` takes a comma-separated pair for dual stack
("10.244.0.0/16,fd00:10:244::/56"), and passes it on as kube-controller-manager's
`--cluster-cidr` (kubernetes/website content/en/docs/setup/production-environment/tools/kubeadm/
dual-stack-support.md; kube-controller-manager accepts "a comma-separated dual-stack pair" with at
most one CIDR per family: cmd/kube-controller-manager/app/options, validateCIDRs). BKE's
`networking.podSubnet` is the same string: it reaches `--cluster-cidr` and kube-proxy's
`clusterCIDR` unchanged (both take the pair), and calico gets one pool per family (bke.core.calico).
Pure.
"""
from __future__ import annotations

import ipaddress

__all__ = ["Network", "parse_pod_subnets"]

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_pod_subnets(text: str) -> list[Network]:
    """The pod networks, in the order given; ValueError saying what is wrong (a malformed CIDR,
    more than two, or two of one family)."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) > 2:
        raise ValueError(f"{text!r}: at most two CIDRs, one IPv4 and one IPv6 (a dual-stack pair)")
    nets: list[Network] = []
    for p in parts:
        try:
            nets.append(ipaddress.ip_network(p, strict=True))
        except ValueError as exc:
            raise ValueError(f"malformed CIDR {p!r}: {exc}") from None
    if len(nets) == 2 and nets[0].version == nets[1].version:
        raise ValueError(f"{text!r}: a dual-stack pair needs one IPv4 and one IPv6 CIDR, not two IPv{nets[0].version}")
    return nets
