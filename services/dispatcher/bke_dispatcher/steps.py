"""Per-node steps of each phase: pure functions from the plan and the node's files.

Which file goes in which phase is a table (FILE_PHASES); health endpoints are what the
kubelet would probe (no TLS verification, like kubelet HTTPS probes), except etcd, whose
metrics listener answers /health in plain HTTP on every supported version.
"""
from __future__ import annotations

import fnmatch

from bke.contracts.agent import CheckHost, FetchFile, Step, SystemdUnit, WaitHealth, WriteFile
from bke.plan import NodePlan, Plan
from bke.render.layout import PORTS
from bke.state.nodefiles import NodeFile

__all__ = [
    "FILE_PHASES",
    "binaries",
    "component_ports",
    "file_phase",
    "health_steps",
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

# Where each binary goes: containerd as its release tarball lays it out, kubelet and kubectl
# as the distro packages do (the rendered units point there).
BINARIES = {"containerd": "/usr/local/bin/containerd", "kubelet": "/usr/bin/kubelet", "kubectl": "/usr/bin/kubectl"}


def file_phase(path: str) -> str:
    for pattern, phase in FILE_PHASES:
        if fnmatch.fnmatchcase(path, pattern):
            return phase
    return "node-env"


def write_steps(files: list[NodeFile], phase: str, prefix: str = "write") -> list[Step]:
    out: list[Step] = []
    for f in sorted(files, key=lambda f: f.path):
        if phase != "certs" and file_phase(f.path) != phase:
            continue
        out.append(
            WriteFile(
                id=f"{prefix}:{f.path}",
                path=f.path,
                mode=f.mode,
                content_b64=f.content_b64,
                sealed_b64=f.sealed_b64,
                sha256=f.sha256,
            )
        )
    return out


def binaries(plan: Plan, sums: dict[str, str]) -> list[Step]:
    """containerd, kubelet and kubectl from the spec's httpRepo, each checksum-verified."""
    c = plan.spec.config
    repo = c.http_repo.rstrip("/")
    versions = {"containerd": c.containerd_version, "kubelet": c.kubernetes_version, "kubectl": c.kubernetes_version}
    return [
        FetchFile(
            id=f"fetch:{name}",
            url=f"{repo}/{name}/{versions[name]}/linux/amd64/{name}",
            path=BINARIES[name],
            sha256=sums[name],
            timeout_s=600,
            retries=3,
            backoff_s=2,
        )
        for name in BINARIES
    ]


def component_ports(plan: Plan, node: NodePlan) -> list[int]:
    ports = [10250]  # kubelet
    for c in plan.etcd_clusters:
        if c.name in node.components:
            ports += [c.client_port, c.peer_port, c.metrics_port]
    for comp, port in (("kube-apiserver", 6443), ("kube-controller-manager", 10257), ("kube-scheduler", 10259)):
        if comp in node.components:
            ports.append(port)
    return sorted(ports)


def node_env_steps(plan: Plan, node: NodePlan, files: list[NodeFile], sums: dict[str, str]) -> list[Step]:
    return [
        CheckHost(id="preflight", checks=["os", "swap-off", "ports-free", "disk", "time"], ports=component_ports(plan, node)),
        *binaries(plan, sums),
        *write_steps(files, "node-env"),
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
        # healthzPort in the rendered KubeletConfiguration, bke.render.layout PORTS); on
        # every node, workers and etcd-only nodes (a standalone kubelet) included
        out.append(WaitHealth(id="health:kubelet", url=f"http://127.0.0.1:{PORTS['kubelet-healthz']}/healthz",
                              expect_body="ok", timeout_s=timeout_s))
    for comp, url in (
        ("kube-apiserver", "https://127.0.0.1:6443/livez"),
        ("kube-controller-manager", "https://127.0.0.1:10257/healthz"),
        ("kube-scheduler", "https://127.0.0.1:10259/healthz"),
    ):
        if comp in node.components and comp in components:
            out.append(WaitHealth(id=f"health:{comp}", url=url, timeout_s=timeout_s))
    return out
