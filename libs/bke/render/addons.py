"""The built-in addons' manifests, rendered once per cluster: kube-proxy and CoreDNS.

Other addons (the CNI included) come from user folders of manifests and are applied by the
dispatcher. A built-in listed in the spec's addons with a `path` is the user's own copy: we do
not render ours then. A listed built-in's `version` picks the image tag; otherwise kube-proxy
follows the Kubernetes version and CoreDNS the versions table.
"""
from __future__ import annotations

import ipaddress

from ..spec.models import Addon
from ..versions import KUBERNETES
from .context import Ctx
from .errors import Finding
from .layout import PORTS
from .params import CoreDNSAddon, KubeProxyAddon
from .result import RenderedFile
from .templates import TemplateSet
from .validate import validate_addon

__all__ = ["ADDONS", "render_addons"]

ADDONS = ("kube-proxy", "coredns")


def _listed(ctx: Ctx, name: str) -> Addon | None:
    return next((a for a in ctx.plan.spec.cluster.spec.cluster_config.addons if a.name == name), None)


def _tag(version: str) -> str:
    return version if version.startswith("v") else f"v{version}"


def _kube_proxy(ctx: Ctx, version: str) -> KubeProxyAddon:
    return KubeProxyAddon(
        image=ctx.image("kube-proxy", _tag(version)),
        server=f"https://{ctx.plan.control_plane_endpoint}",
        cluster_cidr=ctx.config.networking.pod_subnet,
        mode="iptables",
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


def render_addons(ctx: Ctx, ts: TemplateSet, findings: list[Finding]) -> tuple[RenderedFile, ...]:
    out = []
    defaults = {"kube-proxy": str(ctx.versions.kubernetes), "coredns": KUBERNETES[ctx.versions.kubernetes.minor_key].coredns}
    builders = {"kube-proxy": _kube_proxy, "coredns": _coredns}
    for name in ADDONS:
        listed = _listed(ctx, name)
        if listed is not None and listed.path:
            continue  # the user ships their own manifests for it
        params = builders[name](ctx, listed.version if listed else defaults[name])
        text = ts.render(f"k8s/{name}.yaml.j2", params)
        findings.extend(Finding("", f"{name}.yaml", "addon", p) for p in validate_addon(text, ctx.versions.kubernetes.minor_key))
        out.append(RenderedFile(f"{name}.yaml", 0o644, text.encode()))
    return tuple(out)
