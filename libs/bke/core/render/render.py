"""render_cluster(plan, inputs) -> RenderedCluster: the pure entry point.

Steps, top to bottom (each fails with a typed error, see errors.py):
 1. versions: every version in the supported table, else UnsupportedVersionError;
 2. inputs: the VRRP password when the endpoint is a VIP, else MissingInputError;
 3. user flags: denylist and version gates of every extraArgs flag, else DeniedFlagError (spec
    validation refused these already; this is the second line of defence);
 4. per node, every row of FILES whose component the node runs: build typed parameters, render
    the template, parse the output back and validate it;
 5. per node, cross-file checks (ports unique, kubelet and containerd agree on the cgroup driver),
    and every flag BKE itself renders (defaults, presets) is one the flag table accepts in the version;
 6. the cluster-level addons (kube-proxy, CoreDNS), every object validated;
 7. any finding at all: InvalidOutputError with all of them; else the RenderedCluster.

No I/O, no clock, no randomness: the same plan and inputs give the same bytes and digest.
"""
from __future__ import annotations

import ipaddress
from collections.abc import Callable
from dataclasses import dataclass, field

from pydantic import BaseModel

from bke.core.flagrules.gates import VersionSet
from bke.core.plan import NodePlan, Plan
from bke.core.versions import CONTAINERD_MINORS, ETCD_MINORS, KUBERNETES, parse_version
from .addons import render_addons
from .args import COMPONENT_FIELDS, check_extra_args
from .checks import port_conflicts
from .components import apiserver_pod, controller_manager_pod, etcd_pod, scheduler_pod
from .context import Ctx, RenderInputs
from .errors import DeniedFlagError, Finding, InvalidOutputError, RenderRejected
from .gates import resolve_versions
from .host_files import crictl_config, modules_load, sysctl_conf
from .k8s_schema import precompile
from .layout import PORTS
from .node_files import (check_script, containerd_config, containerd_unit, haproxy_cfg, haproxy_pod, keepalived_conf, keepalived_pod,
                         kubelet_config, kubelet_unit, registry_errors, registry_hosts)
from .result import NodeFiles, RenderedCluster, RenderedFile
from .templates import TemplateSet, template_set
from .validate import VALIDATORS, Expect, Result

__all__ = ["FILES", "FileRule", "RENDERED_KINDS", "render_cluster", "preload_templates"]

# Every Kubernetes kind the templates produce (the addon objects and the static pods).
RENDERED_KINDS = [("Pod", "v1"), ("ServiceAccount", "v1"), ("ConfigMap", "v1"), ("Service", "v1"),
                  ("ClusterRole", "rbac.authorization.k8s.io/v1"), ("ClusterRoleBinding", "rbac.authorization.k8s.io/v1"),
                  ("DaemonSet", "apps/v1"), ("Deployment", "apps/v1")]


@dataclass(frozen=True)
class FileRule:
    component: str  # the plan component that makes a node get this file
    template: str
    kind: str  # validator (validate.VALIDATORS); "containerd" resolves to -v2/-v3 by version
    mode: int
    build: Callable[[Ctx, NodePlan], list[tuple[str, object]]]
    secret: bool = False


def _etcd(name: str) -> Callable[[Ctx, NodePlan], list[tuple[str, object]]]:
    return lambda ctx, node: etcd_pod(ctx, node, name)


# Every file a node can get, in the order they are listed in the output.
FILES: tuple[FileRule, ...] = (
    FileRule("containerd", "containerd/config.toml.j2", "containerd", 0o644, containerd_config),
    FileRule("containerd", "common/containerd.service.j2", "systemd-unit", 0o644, containerd_unit),
    FileRule("containerd", "common/hosts.toml.j2", "hosts-toml", 0o644, registry_hosts),
    # every node's kernel modules; the sysctls and crictl.yaml on registered nodes (host_files)
    FileRule("containerd", "common/modules-load.conf.j2", "modules-load", 0o644, modules_load),
    FileRule("containerd", "common/sysctl.conf.j2", "sysctl", 0o644, sysctl_conf),
    FileRule("containerd", "common/crictl.yaml.j2", "crictl-config", 0o644, crictl_config),
    FileRule("kubelet", "k8s/kubelet-config.yaml.j2", "kubelet-config", 0o644, kubelet_config),
    FileRule("kubelet", "k8s/kubelet.service.j2", "systemd-unit", 0o644, kubelet_unit),
    FileRule("etcd-data", "etcd/etcd.yaml.j2", "pod", 0o600, _etcd("etcd-data")),
    FileRule("etcd-events", "etcd/etcd.yaml.j2", "pod", 0o600, _etcd("etcd-events")),
    FileRule("etcd-pods", "etcd/etcd.yaml.j2", "pod", 0o600, _etcd("etcd-pods")),
    FileRule("haproxy", "common/haproxy.cfg.j2", "haproxy-cfg", 0o644, haproxy_cfg),
    FileRule("haproxy", "common/haproxy.yaml.j2", "pod", 0o600, haproxy_pod),
    FileRule("keepalived", "common/keepalived.conf.j2", "keepalived-conf", 0o600, keepalived_conf, secret=True),
    FileRule("keepalived", "common/check_apiserver.sh.j2", "shell", 0o755, check_script),
    FileRule("keepalived", "common/keepalived.yaml.j2", "pod", 0o600, keepalived_pod),
    FileRule("kube-apiserver", "k8s/kube-apiserver.yaml.j2", "pod", 0o600, apiserver_pod),
    FileRule("kube-controller-manager", "k8s/kube-controller-manager.yaml.j2", "pod", 0o600, controller_manager_pod),
    FileRule("kube-scheduler", "k8s/kube-scheduler.yaml.j2", "pod", 0o600, scheduler_pod),
)


def _node_reserved(node: NodePlan) -> dict[str, list[tuple[int, str]]]:
    """Ports the node's own daemons hold, so that no pod can be given one of them."""
    owners = {"kubelet": [(PORTS["kubelet"], "TCP"), (PORTS["kubelet-healthz"], "TCP")]}
    if node.runs("kube-proxy"):
        owners["kube-proxy"] = [(PORTS["kube-proxy-metrics"], "TCP"), (PORTS["kube-proxy-healthz"], "TCP")]
    return owners


@dataclass
class _Seen:
    """What one render_cluster call has already done, by input. Both are pure: a template reads
    only its typed parameters (StrictUndefined), so equal parameters (the same JSON of every
    field) give the same text; the checks are pure in (text, expect). Most files of a worker
    are every worker's (all but kubelet.service, which names the node): rendered and parsed
    back once per cluster, and their bytes shared by every node that has them."""

    texts: dict[tuple[str, str], tuple[str, bytes]] = field(default_factory=dict)  # (template, params JSON)
    checked: dict[tuple[str, str], Result] = field(default_factory=dict)  # (kind, text)

    def render(self, ts: TemplateSet, template: str, params: object) -> tuple[str, bytes]:
        if not isinstance(params, BaseModel):  # every builder's are models; anything else is rendered each time
            text = ts.render(template, params)
            return text, text.encode()
        key = (template, params.model_dump_json())
        out = self.texts.get(key)
        if out is None:
            text = ts.render(template, params)
            out = self.texts[key] = (text, text.encode())
        return out


def _render_node(ctx: Ctx, ts: TemplateSet, node: NodePlan, expect: Expect, findings: list[Finding],
                 seen: _Seen) -> NodeFiles:
    files: list[RenderedFile] = []
    owners = _node_reserved(node)
    cgroups: dict[str, str] = {}
    for rule in FILES:
        if not node.runs(rule.component):
            continue
        kind = rule.kind
        if kind == "containerd":
            kind = "containerd-v3" if ctx.versions.containerd.major >= 2 else "containerd-v2"
        for path, params in rule.build(ctx, node):
            text, data = seen.render(ts, rule.template, params)
            # the same bytes checked once per cluster (parsing back is three quarters of a render)
            result = seen.checked.get((kind, text))
            if result is None:
                result = seen.checked[(kind, text)] = VALIDATORS[kind](text, expect)
            problems, facts = result
            findings.extend(Finding(node.hostname, path, kind, p) for p in problems)
            if "ports" in facts:
                owners[f"pod {facts['pod']}"] = facts["ports"]
            if "cgroup" in facts:
                cgroups[path] = facts["cgroup"]
            files.append(RenderedFile(path, rule.mode, data, rule.secret))
    findings.extend(Finding(node.hostname, "(node)", "ports-unique", p) for p in port_conflicts(owners))
    if len(set(cgroups.values())) > 1:
        findings.append(Finding(node.hostname, "(node)", "cgroup-driver", f"kubelet and containerd disagree: {cgroups}"))
    return NodeFiles(node.hostname, tuple(files))


def _expect(plan: Plan, ctx: Ctx) -> Expect:
    allowed = set(plan.spec.config.allow_unsafe_flags)
    overridden = bool({"etcd-servers-overrides", "kube-apiserver/etcd-servers-overrides"} & allowed)
    port = plan.control_plane_endpoint.rpartition(":")[2]
    return Expect(
        k8s_minor=ctx.versions.kubernetes.minor_key,
        etcd_overrides=None if overridden else plan.apiserver.etcd_servers_overrides,
        endpoint_port=int(port),
        apiserver_ips=tuple(str(ipaddress.ip_address(n.ip)) for n in ctx.running("kube-apiserver")),
    )


def render_cluster(plan: Plan, inputs: RenderInputs) -> RenderedCluster:
    versions = resolve_versions(plan)  # 1
    ctx = Ctx.build(plan, versions, inputs)  # 2
    placed = [c for c in COMPONENT_FIELDS if c == "kubelet" or ctx.running(c)]
    errors, warnings = check_extra_args(plan.spec, versions, placed)  # 3
    if errors:
        raise DeniedFlagError(errors, cluster=plan.cluster)
    reg_errors = registry_errors(ctx)
    if reg_errors:
        raise RenderRejected(reg_errors, cluster=plan.cluster)
    ts = template_set(versions)
    expect = _expect(plan, ctx)
    findings: list[Finding] = []
    seen = _Seen()
    nodes = tuple(_render_node(ctx, ts, n, expect, findings, seen) for n in plan.nodes)  # 4, 5
    addons = render_addons(ctx, ts, findings)  # 6
    findings += [Finding(host, comp, "flag-table", f"rendered --flag: {msg}") for host, comp, msg in dict.fromkeys(ctx.flag_problems)]
    if findings:  # 7
        raise InvalidOutputError(findings)
    return RenderedCluster(
        cluster=plan.cluster,
        kubernetes_version=str(versions.kubernetes),
        etcd_version=str(versions.etcd),
        containerd_version=str(versions.containerd),
        tier=ctx.tier.name,
        template_sets=ts.folders,
        nodes=nodes,
        addons=addons,
        # validation already reported the allowUnsafeFlags warnings into the plan: once each
        warnings=tuple(dict.fromkeys(list(plan.warnings) + warnings)),
    )


def preload_templates() -> int:
    """Load every template set and compile the schema checks of every rendered kind for every
    supported minor. The service calls it at start, so that no plan pays for it; returns the
    number of template sets loaded."""
    sets = set()
    for k8s in KUBERNETES:
        precompile(k8s, RENDERED_KINDS)
        for etcd in ETCD_MINORS:
            for containerd in CONTAINERD_MINORS:
                vs = VersionSet(parse_version(f"{k8s}.0"), parse_version(f"{etcd}.0"), parse_version(f"{containerd}.0"))
                sets.add(template_set(vs).folders)
    return len(sets)
