"""Per-node steps of each phase: pure functions from the plan and the node's files (the
dispatcher's install phases and the upgrader's node commands use the same ones).

Which file goes in which phase is a table (FILE_PHASES); health endpoints are what the
kubelet would probe (no TLS verification, like kubelet HTTPS probes), except etcd, whose
metrics listener answers /health in plain HTTP on every supported version.
"""
from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable

from bke.core.artefacts import Artefact, node_artefacts
from bke.contracts.agent_steps import CheckHost, FetchFile, RunProgram, Step, SystemdUnit, WaitHealth, WriteFile
from bke.core.node_kernel import (
    OLD_KERNEL_MODULES,
    OLD_KERNEL_MODULES_FILE,
    PROXY_MIN_KERNEL,
    SYSCTL_FILE,
    kernel_modules,
    sysctls,
)
from bke.core.paths import first_match
from bke.core.plan import NodePlan, Plan
from bke.core.render.layout import PORTS, SECRET_PATHS
from bke.core.spec.host_rules import requires_cgroup_v2
from bke.core.state.nodefiles import NodeFile

__all__ = [
    "FILE_PHASES",
    "artefacts_of",
    "binaries",
    "component_ports",
    "file_phase",
    "health_steps",
    "kernel_steps",
    "node_env_steps",
    "plan_artefacts",
    "swap_steps",
    "write_steps",
]

# First match wins; anything unmatched is node environment (containerd, kubelet, units).
FILE_PHASES: tuple[tuple[str, str], ...] = (
    ("/etc/kubernetes/manifests/haproxy.yaml", "load-balancer"),
    ("/etc/kubernetes/manifests/keepalived.yaml", "load-balancer"),
    ("/etc/haproxy/*", "load-balancer"),
    ("/etc/keepalived/*", "load-balancer"),
    ("/etc/kubernetes/manifests/etcd*.yaml", "etcd"),
    ("/etc/kubernetes/manifests/kube-*.yaml", "control-plane"),
)

def file_phase(path: str) -> str:
    return first_match(path, FILE_PHASES, "node-env")


def write_steps(files: list[NodeFile], phase: str, prefix: str = "write",
                seal: Callable[[bytes], bytes] | None = None) -> list[Step]:
    """A WriteFile per file of `phase`. A rendered file that holds a credential
    (`bke.core.render.layout.SECRET_PATHS`: keepalived.conf, the VRRP password) is sealed with `seal`
    (to the node's agent), never sent in clear: without `seal` it is refused."""
    out: list[Step] = []
    for f in sorted(files, key=lambda f: f.path):
        if phase != "certs" and file_phase(f.path) != phase:
            continue
        clear, sealed = f.content_b64, f.sealed_b64
        if clear is not None and f.path in SECRET_PATHS:
            if seal is None:
                raise ValueError(f"{f.path}: a secret file is sent only sealed to its node's agent")
            sealed = base64.b64encode(seal(base64.b64decode(clear))).decode()
            clear = None
        out.append(WriteFile(id=f"{prefix}:{f.path}", path=f.path, mode=f.mode, content_b64=clear, sealed_b64=sealed,
                             sha256=f.sha256))
    return out


def artefacts_of(plan: Plan, node: NodePlan) -> list[Artefact]:
    """What this node fetches: its arch's binaries, and the pod-network tools if it registers."""
    return node_artefacts(plan.spec.config, node.arch, registers=node.registers)


def plan_artefacts(plan: Plan) -> list[Artefact]:
    """Every artefact some node of the plan fetches, once each (what the checksums cover)."""
    seen: dict[str, Artefact] = {}
    kinds = sorted({(n.arch, n.registers) for n in plan.nodes})  # a handful, whatever the node count
    for arch, registers in kinds:
        for a in node_artefacts(plan.spec.config, arch, registers=registers):
            seen.setdefault(a.path, a)
    return list(seen.values())


def binaries(plan: Plan, node: NodePlan, sums: dict[str, str]) -> list[Step]:
    """The node's artefacts from the spec's httpRepo, each checksum-verified; `sums` maps each
    artefact's URL to its sha256 (checksums.py)."""
    repo = plan.spec.config.http_repo
    out: list[Step] = []
    for a in artefacts_of(plan, node):
        assert a.dest is not None, f"{a.path} has no place on a node"
        url = a.url(repo)
        out.append(FetchFile(id=f"fetch:{a.key}", url=url, path=a.dest, sha256=sums[url], mode=a.mode,
                             timeout_s=600, retries=3, backoff_s=2))
    return out


def kernel_steps(plan: Plan, node: NodePlan) -> list[Step]:
    """Load the node's modules and set its sysctls now; the files written before make both
    last across reboots (bke.core.node_kernel: the same lists). A module only older kernels name
    (nf_conntrack_ipv4 for ipvs) is persisted and loaded by steps the agent runs only on such a
    kernel (`kernel_below`): it knows the kernel, the dispatcher does not."""
    mode = plan.spec.config.kube_proxy.mode if node.runs("kube-proxy") else None
    out: list[Step] = [RunProgram(id="kernel:modprobe", argv=["modprobe", "-a", *kernel_modules(registers=node.registers, proxy_mode=mode)])]
    for below, module in OLD_KERNEL_MODULES.get(mode or "", ()):
        text = f"# BKE: kube-proxy {mode} on a kernel before {below}\n{module}\n".encode()
        out += [WriteFile(id=f"write:{OLD_KERNEL_MODULES_FILE}", path=OLD_KERNEL_MODULES_FILE, mode=0o644,
                          content_b64=base64.b64encode(text).decode(), sha256=hashlib.sha256(text).hexdigest(),
                          kernel_below=below),
                RunProgram(id=f"kernel:modprobe-{module}", argv=["modprobe", module], kernel_below=below)]
    if sysctls(registers=node.registers):
        # after modprobe: the net.bridge.* keys exist only once br_netfilter is loaded
        out.append(RunProgram(id="kernel:sysctl", argv=["sysctl", "-p", SYSCTL_FILE]))
    return out


def swap_steps() -> list[Step]:
    """Swap off now, and for good without editing /etc/fstab: systemd-fstab-generator turns each
    fstab swap entry into a .swap unit pulled in by swap.target, so a masked swap.target starts
    none of them at boot (kubespray does the same: roles/kubernetes/preinstall/tasks/
    0010-swapoff.yml, "Mask swap.target (persist swapoff)", commit 46dbdd39). Then the
    kubelet's own requirement (no active swap) is checked.
    Not covered: swap that something else starts (a swapon in a script, a zram service not
    tied to swap.target): the check step then fails, saying swap is still on."""
    return [
        RunProgram(id="swap:off", argv=["swapoff", "-a"]),
        SystemdUnit(id="systemd:mask-swap", unit="swap.target", action="mask"),
        CheckHost(id="check:swap-off", checks=["swap-off"]),
    ]


def component_ports(plan: Plan, node: NodePlan, components: list[str] | tuple[str, ...] | None = None) -> list[int]:
    """The ports `components` (default: every component of the node) listen on."""
    runs = node.components if components is None else components
    ports = [10250] if "kubelet" in runs else []
    for c in plan.etcd_clusters:
        if c.name in runs:
            ports += [c.client_port, c.peer_port, c.metrics_port]
    for comp, port in (("kube-apiserver", 6443), ("kube-controller-manager", 10257), ("kube-scheduler", 10259)):
        if comp in runs:
            ports.append(port)
    return sorted(ports)


def node_env_steps(plan: Plan, node: NodePlan, files: list[NodeFile], sums: dict[str, str],
                   held: tuple[int, ...] = ()) -> list[Step]:
    """`held`: ports the node's running parts hold already (a node joining again with more
    parts): not checked free, the rest of what it will run is."""
    mode = plan.spec.config.kube_proxy.mode
    min_kernel = PROXY_MIN_KERNEL[mode] if node.runs("kube-proxy") else None
    checks: list[str] = ["os", "ports-free", "disk", "time", "arch", "cgroup"] + (["kernel-version"] if min_kernel else [])
    return [
        # nothing is changed before the node is known to fit: its OS, free ports, disk, clock,
        # its machine is the spec's arch, and (kube-proxy nftables) its kernel is new enough
        CheckHost(id="preflight", checks=checks, ports=[p for p in component_ports(plan, node) if p not in held],
                  arch=node.arch,
                  require_cgroup_v2=requires_cgroup_v2(plan.spec, node.hostname),
                  min_kernel=f"{min_kernel[0]}.{min_kernel[1]}" if min_kernel else None),
        *binaries(plan, node, sums),
        # containerd and kubelet configs, units, crictl.yaml, modules-load.d and sysctl.d files
        *write_steps(files, "node-env"),
        *kernel_steps(plan, node),
        # swap checked only after it is turned off (the preflight would refuse a node we can fix)
        *swap_steps(),
        SystemdUnit(id="systemd:daemon-reload", unit="", action="daemon-reload"),
        SystemdUnit(id="systemd:containerd", unit="containerd.service", action="enable-now"),
        # kubelet before any static pod: it is what runs them
        SystemdUnit(id="systemd:kubelet", unit="kubelet.service", action="enable-now"),
    ]


def health_steps(plan: Plan, node: NodePlan, components: tuple[str, ...], timeout_s: float) -> list[Step]:
    out: list[Step] = []
    for c in plan.etcd_clusters:
        if c.name in node.components and c.name in components:
            out.append(
                WaitHealth(
                    id=f"health:{c.name}",
                    url=f"http://127.0.0.1:{c.metrics_port}/health",
                    expect_body='"health":"true"',
                    timeout_s=timeout_s,
                )
            )
    if "kubelet" in node.components and "kubelet" in components:
        # the kubelet's own healthz: plain HTTP on loopback (healthzBindAddress 127.0.0.1 and
        # healthzPort in the rendered KubeletConfiguration, bke.core.render.layout PORTS); on
        # every node, workers and etcd-only nodes (a standalone kubelet) included
        out.append(WaitHealth(id="health:kubelet", url=f"http://127.0.0.1:{PORTS['kubelet-healthz']}/healthz",
                              expect_body="ok", timeout_s=timeout_s))
    if "haproxy" in node.components and "haproxy" in components:
        # haproxy.cfg's `monitor-uri` frontend on loopback (templates/common/haproxy.cfg.j2): it
        # answers 200 once haproxy runs with its configuration, whatever its backends' state
        out.append(WaitHealth(id="health:haproxy", url=f"http://127.0.0.1:{PORTS['haproxy-healthz']}/healthz",
                              timeout_s=timeout_s))
    for comp, url in (
        ("kube-apiserver", "https://127.0.0.1:6443/livez"),
        ("kube-controller-manager", "https://127.0.0.1:10257/healthz"),
        ("kube-scheduler", "https://127.0.0.1:10259/healthz"),
    ):
        if comp in node.components and comp in components:
            out.append(WaitHealth(id=f"health:{comp}", url=url, timeout_s=timeout_s))
    return out
