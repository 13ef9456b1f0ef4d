"""The built-in addons' manifests, rendered once per cluster: bootstrap RBAC, kube-proxy, CoreDNS.

Which ones, and their versions, come from the addon table (bke.core.spec.addons): a built-in turned
off or replaced by the user's own copy (`path`) is not rendered. The CNI's manifest is fetched
by the dispatcher from the httpRepo (it is upstream's, never copied here); user addons are
folders the dispatcher reads. A listed built-in's `version` picks the image tag; otherwise
kube-proxy follows the Kubernetes version and CoreDNS the versions table.
"""
from __future__ import annotations

import ipaddress

import yaml

from bke.core.rbac import rbac_objects
from bke.core.spec.addons import addon_steps
from .context import Ctx
from .errors import Finding
from .layout import PORTS
from .params import CoreDNSAddon, KubeProxyAddon
from .result import RenderedFile
from .templates import TemplateSet
from .validate import validate_addon

__all__ = ["ADDONS", "render_addons"]

ADDONS = ("rbac", "kube-proxy", "coredns")  # what this module can render (source "rendered")


def _tag(version: str) -> str:
    return version if version.startswith("v") else f"v{version}"


def _kube_proxy(ctx: Ctx, version: str) -> KubeProxyAddon:
    return KubeProxyAddon(
        image=ctx.image("kube-proxy", _tag(version)),
        server=f"https://{ctx.plan.control_plane_endpoint}",
        cluster_cidr=ctx.config.networking.pod_subnet,
        mode=ctx.plan.spec.config.kube_proxy.mode,
        healthz_port=PORTS["kube-proxy-healthz"],
        metrics_port=PORTS["kube-proxy-metrics"],
    )


def _coredns(ctx: Ctx, version: str) -> CoreDNSAddon:
    net = ctx.config.networking
    # kubeadm's convention: coredns/coredns on registry.k8s.io, plain coredns on a custom repository.
    name = "coredns/coredns" if ctx.config.image_repo.rstrip("/") == "registry.k8s.io" else "coredns"
    return CoreDNSAddon(
        image=ctx.image(name, _tag(version)),
        dns_ip=str(ipaddress.ip_network(net.service_subnet, strict=False)[10]),
        domain=net.dns_domain,
        replicas=2,
    )


def _rbac_text(ctx: Ctx) -> str:
    # from the data table (bke.core.rbac), not a template: the bindings differ per minor, nothing else
    docs = rbac_objects(str(ctx.versions.kubernetes))
    return "---\n".join(yaml.safe_dump(d, sort_keys=True, default_flow_style=False) for d in docs)


def render_addons(ctx: Ctx, ts: TemplateSet, findings: list[Finding]) -> tuple[RenderedFile, ...]:
    out = []
    builders = {"kube-proxy": _kube_proxy, "coredns": _coredns}
    minor = ctx.versions.kubernetes.minor_key
    for step in addon_steps(ctx.plan.spec):
        if step.source != "rendered":
            continue  # fetched (the CNI) or the user's own folder
        if step.name == "rbac":
            text = _rbac_text(ctx)
        else:
            text = ts.render(f"k8s/{step.name}.yaml.j2", builders[step.name](ctx, step.version))
        findings.extend(Finding("", f"{step.name}.yaml", "addon", p) for p in validate_addon(text, minor))
        out.append(RenderedFile(f"{step.name}.yaml", 0o644, text.encode()))
    return tuple(out)
