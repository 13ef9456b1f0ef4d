"""Files every node gets: kubelet configuration and systemd unit, containerd config.toml and the
registry hosts.toml files; and the control-plane load balancer (haproxy + keepalived) on masters
when the endpoint is a VIP.
"""
from __future__ import annotations

import functools
import hashlib
import ipaddress
import re

from bke.core.paths import KUBELET_CONF, KUBELET_CONFIG, MANIFESTS_DIR
from bke.core.plan import NodePlan
from bke.core.versions import KUBERNETES
from .args import format_flags
from .context import Ctx, url_host
from .errors import RenderRejected
from .layout import (CONTAINERD_BIN, CONTAINERD_CERTS_D, CONTAINERD_CONFIG, CONTAINERD_UNIT, CONTAINERD_SOCKET, HAPROXY_CFG, IMAGES, KEEPALIVED_CHECK,
                     KEEPALIVED_CONF, KUBELET_BIN, KUBELET_UNIT, PKI, PORTS)
from .params import (Backend, CheckScript, ContainerdConfig, ContainerdUnit, HaproxyCfg, HaproxyPod, HostEntry, HostsToml,
                     KeepalivedConf, KeepalivedPod, KubeletConfig, KubeletUnit, Params, Taint)

__all__ = [
    "CONFIG_ANNOTATION",
    "check_script",
    "config_digest",
    "containerd_config",
    "haproxy_cfg",
    "haproxy_pod",
    "keepalived_conf",
    "keepalived_pod",
    "kubelet_config",
    "kubelet_unit",
    "registry_hosts",
    "registry_errors",
]

Emit = list[tuple[str, object]]
# The load balancer's static pods mount their configuration from the host (haproxy.cfg,
# keepalived.conf), so a new configuration alone would change nothing the kubelet watches: the
# pod keeps running the old one (neither daemon re-reads its file unasked). The manifest carries
# a digest of what the configuration is made from, so a changed configuration is a changed
# manifest and the kubelet restarts the pod (Helm's "checksum/config" annotation, for the same
# reason). An apply that adds or removes a master rolls both on every master this way
# (bke.core.lifecycle.apply_run).
CONFIG_ANNOTATION = "bke.bocloud.com/config-digest"
_REGISTRY = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:\d{1,5})?$")
_SYSTEMD_SPECIAL = re.compile(r'[\s"\'\\$%;]')


@functools.lru_cache(maxsize=64)  # one subnet per cluster, asked once per node
def _dns_ip(service_subnet: str) -> str:
    """kubeadm's choice: the 10th address of the service range."""
    return str(ipaddress.ip_network(service_subnet, strict=False)[10])


def kubelet_config(ctx: Ctx, node: NodePlan) -> Emit:
    net = ctx.config.networking
    params = KubeletConfig(
        registered=node.registers,
        cgroup_driver=ctx.config.container_runtime.cgroup_driver,
        cluster_dns=[_dns_ip(net.service_subnet)] if node.registers else [],
        cluster_domain=net.dns_domain,
        ca_file=PKI["ca.crt"],
        static_pod_path=MANIFESTS_DIR,
        runtime_endpoint=f"unix://{CONTAINERD_SOCKET}",
        healthz_port=PORTS["kubelet-healthz"],
        max_pods=110,  # the upstream per-node limit (website: considerations for large clusters)
        taints=[Taint(key=t.key, value=t.value, effect=t.effect) for t in node.taints],
    )
    return [(KUBELET_CONFIG, params)]


def _systemd_arg(flag: str) -> str:
    """Quote a flag for ExecStart only when systemd would split or expand it."""
    if not _SYSTEMD_SPECIAL.search(flag):
        return flag
    return '"' + flag.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$") + '"'


def kubelet_unit(ctx: Ctx, node: NodePlan) -> Emit:
    defaults = {"config": KUBELET_CONFIG, "hostname-override": node.hostname, "node-ip": node.ip}
    if node.registers:
        defaults["kubeconfig"] = KUBELET_CONF
    flags = ctx.flags("kubelet", node, defaults)
    params = KubeletUnit(binary=KUBELET_BIN, flags=[_systemd_arg(f) for f in format_flags(flags)],
                         standalone=not node.registers)
    return [(KUBELET_UNIT, params)]


def containerd_unit(ctx: Ctx, node: NodePlan) -> Emit:
    """The upstream containerd.service, pointing at the release tarball's binary location."""
    return [(CONTAINERD_UNIT, ContainerdUnit(binary=CONTAINERD_BIN, config=CONTAINERD_CONFIG))]


def containerd_config(ctx: Ctx, node: NodePlan) -> Emit:
    rt = ctx.config.container_runtime
    pause = KUBERNETES[ctx.versions.kubernetes.minor_key].pause
    params = ContainerdConfig(
        root="/var/lib/containerd",
        state="/run/containerd",
        socket=CONTAINERD_SOCKET,
        sandbox_image=rt.sandbox_image or ctx.image("pause", pause),
        systemd_cgroup=rt.cgroup_driver == "systemd",
        certs_dir=CONTAINERD_CERTS_D,
    )
    return [(CONTAINERD_CONFIG, params)]


def registry_errors(ctx: Ctx) -> list[tuple[str, str]]:
    rt = ctx.config.container_runtime
    base = "cluster.spec.clusterConfig.cluster.containerRuntime"
    errs = []
    for reg in sorted(rt.registry_mirrors):
        if not _REGISTRY.match(reg):
            errs.append((f"{base}.registryMirrors.{reg}", "not a registry host[:port]"))
        for i, url in enumerate(rt.registry_mirrors[reg]):
            if not re.match(r"^https?://[^\s\"]+$", url):
                errs.append((f"{base}.registryMirrors.{reg}[{i}]", f"{url!r} is not an http(s) URL"))
    for i, reg in enumerate(rt.insecure_registries):
        if not _REGISTRY.match(reg):
            errs.append((f"{base}.insecureRegistries[{i}]", f"{reg!r} is not a registry host[:port]"))
    return errs


def registry_hosts(ctx: Ctx, node: NodePlan) -> Emit:
    """One hosts.toml per registry that has mirrors or is insecure (same on every node)."""
    rt = ctx.config.container_runtime
    insecure = set(rt.insecure_registries)
    out: Emit = []
    for reg in sorted(set(rt.registry_mirrors) | insecure):
        server = "https://registry-1.docker.io" if reg == "docker.io" else f"https://{reg}"
        hosts = [HostEntry(url=u.rstrip("/"), capabilities=["pull", "resolve"], skip_verify=False)
                 for u in rt.registry_mirrors.get(reg, [])]
        if reg in insecure:
            hosts += [HostEntry(url=f"https://{reg}", capabilities=["pull", "resolve", "push"], skip_verify=True),
                      HostEntry(url=f"http://{reg}", capabilities=["pull", "resolve", "push"], skip_verify=False)]
        out.append((f"{CONTAINERD_CERTS_D}/{reg}/hosts.toml", HostsToml(server=server, hosts=hosts)))
    return out


# --- control-plane load balancer (VIP endpoints only) ----------------------------------------
def _endpoint(ctx: Ctx) -> tuple[str, int]:
    host, _, port = ctx.plan.control_plane_endpoint.rpartition(":")
    return host.strip("[]"), int(port)


def haproxy_cfg(ctx: Ctx, node: NodePlan) -> Emit:
    _, port = _endpoint(ctx)
    backends = [Backend(name=n.hostname, address=url_host(n.ip), port=PORTS["kube-apiserver"])
                for n in ctx.running("kube-apiserver")]
    return [(HAPROXY_CFG, HaproxyCfg(frontend_port=port, health_port=PORTS["haproxy-healthz"], backends=backends))]


def config_digest(emitted: Emit, leave_out: frozenset[str] = frozenset()) -> str:
    """sha256 over the parameters of the files a pod mounts, each file's `leave_out` fields
    aside. Over the parameters, not the rendered text, so that a secret among them (the VRRP
    password, the same for the cluster's whole life) stays out of a manifest anyone on the node
    can read: the digest of a short password and a known config would give the password away."""
    h = hashlib.sha256()
    for path, params in emitted:
        assert isinstance(params, Params)
        h.update(f"{path}\0{params.model_dump_json(exclude=set(leave_out))}\0".encode())
    return "sha256:" + h.hexdigest()


def haproxy_pod(ctx: Ctx, node: NodePlan) -> Emit:
    _, port = _endpoint(ctx)
    return [(f"{MANIFESTS_DIR}/haproxy.yaml", HaproxyPod(image=IMAGES["haproxy"], config_path=HAPROXY_CFG,
                                                         frontend_port=port, health_port=PORTS["haproxy-healthz"],
                                                         config_digest=config_digest(haproxy_cfg(ctx, node))))]


def keepalived_conf(ctx: Ctx, node: NodePlan) -> Emit:
    vip, _ = _endpoint(ctx)
    lb_nodes = ctx.running("keepalived")
    peers = [n.hostname for n in lb_nodes]
    i, n = peers.index(node.hostname), len(peers)
    if n > 150:
        raise RenderRejected([("nodes", f"{n} masters run keepalived; VRRP priorities support at most 150")], ctx.plan.cluster)
    lb = ctx.config.load_balancer
    own = ctx.node_spec(node.hostname).load_balancer
    unicast = lb.vrrp == "unicast" and n > 1
    params = KeepalivedConf(
        interface=own.interface if own and own.interface else lb.interface,
        unicast_src_ip=node.ip if unicast else None,
        unicast_peers=[p.ip for p in lb_nodes if p.hostname != node.hostname] if unicast else [],
        router_id=lb.virtual_router_id,
        state="MASTER" if i == 0 else "BACKUP",
        # Distinct priorities, first master highest; a failing check subtracts more than the
        # whole spread, so any healthy node outranks it.
        priority=100 + (n - i),
        weight=n + 1,
        authentication=ipaddress.ip_address(vip).version == 4,
        password=ctx.inputs.vrrp_password or "",
        vip=vip,
        check_path=KEEPALIVED_CHECK,
    )
    return [(KEEPALIVED_CONF, params)]


def keepalived_pod(ctx: Ctx, node: NodePlan) -> Emit:
    digest = config_digest([*keepalived_conf(ctx, node), *check_script(ctx, node)], frozenset({"password"}))
    return [(f"{MANIFESTS_DIR}/keepalived.yaml", KeepalivedPod(image=IMAGES["keepalived"], config_path=KEEPALIVED_CONF,
                                                               check_path=KEEPALIVED_CHECK, config_digest=digest))]


def check_script(ctx: Ctx, node: NodePlan) -> Emit:
    _, port = _endpoint(ctx)
    return [(KEEPALIVED_CHECK, CheckScript(port=port))]
