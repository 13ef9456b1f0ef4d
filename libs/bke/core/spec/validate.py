"""Semantic validation: every cross-field rule, all errors at once, each with its field path.

Returns a report; never raises for user input and never prints.
"""
from __future__ import annotations

import ipaddress
import re
from collections import defaultdict

from pydantic import BaseModel

from bke.core import versions
from .addons import check_addons
from bke.core.flagrules import VersionSet
from bke.core.netaddr import is_ip
from .endpoint import APISERVER_PORT, check_endpoint
from .errors import FieldError
from .extra_args import FLAG_NAME, check_extra_args, placed_flag_components
from .label_syntax import label_errors
from .models import ROLES, ClusterSpec
from .pod_subnets import Network, parse_pod_subnets
from .roles import CONTROL_PLANE_ROLES, ETCD_ROLES, is_master
from .host_rules import cgroup_opt_out_warnings
from .sizes import check_sizes

__all__ = ["ValidationReport", "validate_spec", "APISERVER_PORT"]

_DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_C = "cluster.spec.clusterConfig.cluster"


class ValidationReport(BaseModel):
    errors: list[FieldError]
    warnings: list[str]

    @property
    def ok(self) -> bool:
        return not self.errors


def validate_spec(spec: ClusterSpec) -> ValidationReport:
    errors: list[FieldError] = []
    warnings: list[str] = []
    parsed: dict[str, versions.Version] = {}
    errors += _check_cluster(spec, warnings, parsed)
    errors += _check_nodes(spec, warnings)
    errors += _check_extra_args(spec)
    size_errors, size_warnings = check_sizes(spec)
    errors += size_errors
    warnings += size_warnings
    errors += check_addons(spec, warnings)  # which addons, their switches and modes
    # The denylist and version gates, judged here so that nothing refusable reaches the renderer.
    vs = VersionSet(parsed["kubernetes"], parsed["etcd"], parsed["containerd"]) if len(parsed) == 3 else None
    flag_errors, flag_warnings = check_extra_args(spec, vs, placed_flag_components(spec))
    errors += [FieldError(path=p, message=m) for p, m in flag_errors]
    warnings += flag_warnings
    return ValidationReport(errors=errors, warnings=warnings)


def _check_cluster(spec: ClusterSpec, warnings: list[str], parsed: dict[str, versions.Version]) -> list[FieldError]:
    errs: list[FieldError] = []
    c = spec.config
    name = spec.cluster.metadata.name
    # a label (no dots): the name is one token of every bus subject and Redis key of the cluster
    if not _LABEL.match(name) or len(name) > 63:
        errs.append(FieldError(path="cluster.metadata.name", message=f"{name!r} is not a valid DNS-1123 label (lowercase letters, digits, '-')"))
    ep = spec.cluster.spec.control_plane_endpoint
    if not 1 <= ep.port <= 65535:
        errs.append(FieldError(path="cluster.spec.controlPlaneEndpoint.port", message=f"port {ep.port} is out of range 1-65535"))
    if not is_ip(ep.host) and not _DNS1123.match(ep.host):
        errs.append(FieldError(path="cluster.spec.controlPlaneEndpoint.host", message=f"{ep.host!r} is neither an IP address nor a DNS name"))
    for field, comp in (("kubernetesVersion", "kubernetes"), ("etcdVersion", "etcd"), ("containerdVersion", "containerd")):
        text = getattr(c, {"kubernetesVersion": "kubernetes_version", "etcdVersion": "etcd_version", "containerdVersion": "containerd_version"}[field])
        try:
            parsed[comp] = versions.check_supported(comp, text)
        except versions.VersionError as exc:
            errs.append(FieldError(path=f"{_C}.{field}", message=str(exc)))
    if "kubernetes" in parsed and "etcd" in parsed:
        w = versions.check_pairing(parsed["kubernetes"], parsed["etcd"])
        if w:
            warnings.append(w)
    if "kubernetes" in parsed and "containerd" in parsed:
        errs += [FieldError(path=f"{_C}.containerdVersion", message=m) for m in versions.host_rule_errors(parsed["kubernetes"], parsed["containerd"])]
    if "kubernetes" in parsed:
        warnings += cgroup_opt_out_warnings(spec, parsed["kubernetes"])
    svc = None
    try:
        svc = ipaddress.ip_network(c.networking.service_subnet, strict=True)
    except ValueError as exc:
        errs.append(FieldError(path=f"{_C}.networking.serviceSubnet",
                               message=f"malformed CIDR {c.networking.service_subnet!r}: {exc}"))
    pods: list[Network] = []
    try:
        pods = parse_pod_subnets(c.networking.pod_subnet)  # one CIDR, or a dual-stack pair
    except ValueError as exc:
        errs.append(FieldError(path=f"{_C}.networking.podSubnet", message=str(exc)))
    for pod in pods:
        if svc is not None and svc.version == pod.version and svc.overlaps(pod):
            errs.append(FieldError(path=f"{_C}.networking.podSubnet", message=f"pod subnet {pod} overlaps service subnet {svc}"))
    if not _DNS1123.match(c.networking.dns_domain):
        errs.append(FieldError(path=f"{_C}.networking.dnsDomain", message=f"{c.networking.dns_domain!r} is not a valid DNS domain"))
    for i, san in enumerate(c.api_server.cert_sans):
        if not is_ip(san) and not _DNS1123.match(san.removeprefix("*.")):
            errs.append(FieldError(path=f"{_C}.apiServer.certSANs[{i}]", message=f"{san!r} is neither an IP address nor a DNS name"))
    for field, value in (("imageRepo", c.image_repo), ("httpRepo", c.http_repo)):
        if not value or _CONTROL.search(value) or " " in value:
            errs.append(FieldError(path=f"{_C}.{field}", message=f"{value!r} must be non-empty, without spaces or control characters"))
    for i, addon in enumerate(spec.cluster.spec.cluster_config.addons):
        if not _DNS1123.match(addon.name):
            errs.append(FieldError(path=f"cluster.spec.clusterConfig.addons[{i}].name", message=f"{addon.name!r} is not a valid addon name"))
    return errs


def _check_nodes(spec: ClusterSpec, warnings: list[str]) -> list[FieldError]:
    errs: list[FieldError] = []
    seen_host: dict[str, int] = {}
    seen_ip: dict[str, int] = {}
    any_role: set[str] = set()
    for i, node in enumerate(spec.nodes):
        s = node.spec
        p = f"nodes[{i}].spec"
        if not _DNS1123.match(s.hostname) or len(s.hostname) > 63:
            errs.append(FieldError(path=f"{p}.hostname", message=f"{s.hostname!r} is not a valid DNS-1123 hostname"))
        if s.hostname in seen_host:
            errs.append(FieldError(path=f"{p}.hostname", message=f"duplicate hostname {s.hostname!r} (also nodes[{seen_host[s.hostname]}])"))
        seen_host.setdefault(s.hostname, i)
        if not is_ip(s.ip):
            errs.append(FieldError(path=f"{p}.ip", message=f"malformed IP address {s.ip!r}"))
        elif s.ip in seen_ip:
            errs.append(FieldError(path=f"{p}.ip", message=f"duplicate IP {s.ip} (also nodes[{seen_ip[s.ip]}])"))
        seen_ip.setdefault(s.ip, i)
        if not 1 <= s.port <= 65535:
            errs.append(FieldError(path=f"{p}.port", message=f"port {s.port} is out of range 1-65535"))
        if not s.role:
            errs.append(FieldError(path=f"{p}.role", message="a node needs at least one role"))
        for j, role in enumerate(s.role):
            if role not in ROLES:
                errs.append(FieldError(path=f"{p}.role[{j}]", message=f"unknown role {role!r} (known: {', '.join(ROLES)})"))
            elif role in CONTROL_PLANE_ROLES and not is_master(s.role):
                errs.append(
                    FieldError(
                        path=f"{p}.role[{j}]",
                        message=f"role {role!r} only selects which masters run {CONTROL_PLANE_ROLES[role]}; add 'master' to this node or remove it",
                    )
                )
            if s.role.index(role) != j:
                errs.append(FieldError(path=f"{p}.role[{j}]", message=f"role {role!r} is listed twice"))
        any_role.update(s.role)
        for key, value in s.labels.items():
            if _CONTROL.search(key) or _CONTROL.search(value):
                errs.append(FieldError(path=f"{p}.labels.{key}", message="label holds a control character"))
                continue
            errs += [FieldError(path=f"{p}.labels.{key}", message=m) for m in label_errors(key, value)]
    if not any(is_master(n.spec.role) for n in spec.nodes):
        errs.append(FieldError(path="nodes", message="no node has role 'master' or 'master/node'; a cluster needs a control plane"))
    errs += _check_etcd_sizes(spec)
    errs += check_endpoint(spec, warnings)
    return errs


def _check_etcd_sizes(spec: ClusterSpec) -> list[FieldError]:
    errs = []
    members: dict[str, list[str]] = defaultdict(list)
    for n in spec.nodes:
        for role, cluster in ETCD_ROLES.items():
            if role in n.spec.role:
                members[cluster].append(n.spec.hostname)
    if not members["etcd-data"]:
        members["etcd-data"] = [n.spec.hostname for n in spec.nodes if is_master(n.spec.role)]
    for cluster in ETCD_ROLES.values():
        hosts = members[cluster]
        if hosts and len(hosts) % 2 == 0:
            errs.append(
                FieldError(
                    path="nodes",
                    message=f"etcd cluster {cluster!r} would have {len(hosts)} members ({', '.join(hosts[:7])}"
                    f"{', ...' if len(hosts) > 7 else ''}); etcd needs an odd number (1, 3, 5, 7) to keep quorum",
                )
            )
    return errs


def _check_extra_args(spec: ClusterSpec) -> list[FieldError]:
    errs: list[FieldError] = []
    c = spec.config
    layers = [(f"{_C}.{key}", getattr(c, attr)) for key, attr in _COMPONENT_FIELDS]
    for i, n in enumerate(spec.nodes):
        layers += [(f"nodes[{i}].spec.{key}", getattr(n.spec, attr)) for key, attr in _COMPONENT_FIELDS]
    for prefix, comp in layers:
        if comp is None:
            continue
        for name, value in comp.extra_args.items():
            path = f"{prefix}.extraArgs.{name}"
            if not FLAG_NAME.match(name):
                errs.append(FieldError(path=path, message=f"{name!r} is not a plain flag name (letters, digits and '-', without leading dashes)"))
            if _CONTROL.search(value):
                errs.append(FieldError(path=path, message="value holds a newline, NUL or other control character"))
    return errs


_COMPONENT_FIELDS = (
    ("apiServer", "api_server"),
    ("controllerManager", "controller_manager"),
    ("scheduler", "scheduler"),
    ("etcd", "etcd"),
    ("etcdEvents", "etcd_events"),
    ("etcdPods", "etcd_pods"),
    ("kubelet", "kubelet"),
)
