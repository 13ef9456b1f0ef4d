"""What a node's kernel must have for Kubernetes, as data: the modules to load, the sysctls to
set, and the oldest kernel each kube-proxy mode runs on. The renderer writes them into
`/etc/modules-load.d/` and `/etc/sysctl.d/` (so that they survive a reboot: systemd's
systemd-sysctl.service is ordered after systemd-modules-load.service, so the bridge sysctls
exist when they are applied), and the dispatcher's node-env phase applies the same lists at
once (`modprobe -a`, `sysctl -p`), so the file and the running kernel cannot disagree.

Which node gets what:
* every node runs containerd, whose default snapshotter is overlayfs: `overlay`;
* a node whose kubelet registers runs pods on the pod network (a CNI bridge or veths, Services
  through kube-proxy): `br_netfilter` and the bridge-nf-call sysctls, so that bridged pod
  traffic passes iptables/nftables, and `net.ipv4.ip_forward`, so that it is routed; plus the
  modules of the kube-proxy mode;
* an etcd-only node runs a standalone kubelet with host-network static pods only (etcd): no
  pod network, no Service traffic, so none of the networking settings (and no sysctl file).

Sources (read on paper; applying them was not tried on a real host here):
* kubernetes/website content/en/docs/setup/production-environment/container-runtimes.md
  ("Enable IPv4 packet forwarding": net.ipv4.ip_forward = 1; its earlier revisions also name
  overlay, br_netfilter and net.bridge.bridge-nf-call-ip{,6}tables = 1);
* kubernetes/kubernetes cmd/kubeadm/app/preflight/checks.go: addIPv4Checks requires
  /proc/sys/net/ipv4/ip_forward = 1; older releases also required
  /proc/sys/net/bridge/bridge-nf-call-iptables = 1 (we keep it: calico and the bridge plugin
  still rely on bridged traffic being filtered);
* kubernetes/kubernetes pkg/proxy/ipvs/README.md ("Prerequisite": ip_vs, ip_vs_rr, ip_vs_wrr,
  ip_vs_sh and nf_conntrack) and pkg/proxy/ipvs/util/ipvs.go ``GetRequiredIPVSModules``: on a
  kernel before 4.19 kube-proxy requires nf_conntrack_ipv4 instead of nf_conntrack, because
  Linux 4.19 folded the per-family conntrack modules into nf_conntrack (torvalds/linux commit
  a0ae2562c6c4, "netfilter: conntrack: remove l3proto abstraction"). nf_conntrack itself is a
  module on both sides (nf_conntrack_ipv4 depends on it), so every ipvs node loads it, and a node
  on an older kernel also loads and persists nf_conntrack_ipv4 (:data:`OLD_KERNEL_MODULES`): the
  dispatcher sends those steps marked ``kernel_below`` and the agent, which knows the kernel its
  preflight reports (`uname -r`), runs them only there (:func:`proxy_modules` is the same rule);
* kubernetes/kubernetes pkg/util/kernel/constants.go (NFTablesKubeProxyKernelVersion = "5.13",
  checked by pkg/proxy/nftables at start; the website's virtual-ips.md states the same
  minimum); nf_tables is the module of the nftables framework;
* kubernetes-sigs/kubespray roles/kubernetes/node/tasks/main.yml (commit 46dbdd39, 2026-08):
  the same choices: br_netfilter and bridge-nf-call-* on every node, kube_proxy_ipvs_modules
  plus nf_conntrack for ipvs, nf_tables for nftables, each persisted in /etc/modules-load.d.
"""
from __future__ import annotations

__all__ = [
    "MODULES_FILE",
    "OLD_KERNEL_MODULES",
    "OLD_KERNEL_MODULES_FILE",
    "PROXY_MIN_KERNEL",
    "PROXY_MODULES",
    "SYSCTL_FILE",
    "IPV6_POD_NETWORK_SYSCTLS",
    "kernel_modules",
    "proxy_modules",
    "sysctls",
]

# Our own files, named so that an operator sees who wrote them; 99- so that ours are applied
# after the distribution's defaults in /usr/lib/sysctl.d (an operator's /etc/sysctl.conf,
# linked as 99-sysctl.conf, still sorts after it and wins).
MODULES_FILE = "/etc/modules-load.d/bke.conf"
SYSCTL_FILE = "/etc/sysctl.d/99-bke.conf"

BASE_MODULES: tuple[str, ...] = ("overlay",)
POD_NETWORK_MODULES: tuple[str, ...] = ("br_netfilter",)
PROXY_MODULES: dict[str, tuple[str, ...]] = {
    "iptables": (),  # the iptables modules load on first use
    "ipvs": ("ip_vs", "ip_vs_rr", "ip_vs_wrr", "ip_vs_sh", "nf_conntrack"),
    "nftables": ("nf_tables",),
}
# Modules a kube-proxy mode needs on kernels before a version only: mode -> ((that version, module), ...).
OLD_KERNEL_MODULES: dict[str, tuple[tuple[str, str], ...]] = {"ipvs": (("4.19", "nf_conntrack_ipv4"),)}
OLD_KERNEL_MODULES_FILE = "/etc/modules-load.d/bke-old-kernel.conf"
# The oldest kernel (major, minor) each kube-proxy mode runs on; None: no limit of its own.
PROXY_MIN_KERNEL: dict[str, tuple[int, int] | None] = {"iptables": None, "ipvs": None, "nftables": (5, 13)}

POD_NETWORK_SYSCTLS: tuple[tuple[str, str], ...] = (
    ("net.bridge.bridge-nf-call-ip6tables", "1"),
    ("net.bridge.bridge-nf-call-iptables", "1"),
    ("net.ipv4.ip_forward", "1"),
)
# An IPv6 or dual-stack pod subnet: calico's "Configure dual stack or IPv6 only" (docs.tigera.io/
# calico/<version>/networking/ipam/ipv6, "Kubernetes IPv6 host requirements") needs
# net.ipv6.conf.all.forwarding = 1 for Service and pod traffic over IPv6.
IPV6_POD_NETWORK_SYSCTLS: tuple[tuple[str, str], ...] = (("net.ipv6.conf.all.forwarding", "1"),)


def kernel_modules(*, registers: bool, proxy_mode: str | None) -> tuple[str, ...]:
    """The modules one node loads: `proxy_mode` is the kube-proxy mode if the node runs kube-proxy."""
    out = BASE_MODULES
    if registers:
        out += POD_NETWORK_MODULES
    if proxy_mode is not None:
        out += PROXY_MODULES[proxy_mode]
    return out


def _kernel(release: str) -> tuple[int, int]:
    parts = release.split(".", 2)
    if len(parts) < 2 or not parts[0].isdigit():
        raise ValueError(f"cannot read the kernel version from {release!r}")
    return int(parts[0]), int("".join(ch for ch in parts[1].split("-")[0] if ch.isdigit()) or "0")


def proxy_modules(proxy_mode: str, kernel: str) -> tuple[str, ...]:
    """The modules kube-proxy's `proxy_mode` needs on kernel `kernel` (`uname -r`): what the
    node-env steps load there (PROXY_MODULES, plus OLD_KERNEL_MODULES below their version)."""
    have = _kernel(kernel)
    old = tuple(m for below, m in OLD_KERNEL_MODULES.get(proxy_mode, ()) if have < _kernel(below))
    return PROXY_MODULES[proxy_mode] + old


def sysctls(*, registers: bool, ipv6: bool = False) -> tuple[tuple[str, str], ...]:
    """The kernel parameters one node sets (none on an etcd-only node); `ipv6`: the pod subnet
    has an IPv6 half, so IPv6 pod traffic must be forwarded too."""
    if not registers:
        return ()
    return POD_NETWORK_SYSCTLS + (IPV6_POD_NETWORK_SYSCTLS if ipv6 else ())
