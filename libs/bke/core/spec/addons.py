"""Which addons a cluster gets, in which order: one data table, read by the renderer (what to
render), the dispatcher (what to apply, with which credential, what to wait for), validation and
`bke status` (the order).

The order is the table's: bootstrap RBAC first (everything after it uses admin.conf, whose rights
it grants), kube-proxy (Services), the CNI (pod networking; calico-node talks to the apiserver
through the kubernetes Service, which kube-proxy programs), CoreDNS (a Deployment that needs pod
networking), then the user's addons in spec order.

Switches, as kubeadm and kOps users expect: everything built in is on by default;
`kubeProxy.enabled: false`, `coreDNS.enabled: false` and `cni: none` turn one off. An `addons[]`
entry named like a built-in either overrides its version (no `path`) or, with a `path`, is the
user's own copy, applied in the built-in's place. `rbac` cannot be replaced or turned off.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from bke.core.versions import KUBERNETES, Version, VersionError, parse_version, spelled_like
from .errors import FieldError
from .models import Addon, Cluster, ClusterSpec

__all__ = ["AddonStep", "BUILT_INS", "BuiltIn", "addon_steps", "addons_at", "check_addons"]

Source = Literal["rendered", "fetched", "path"]
_A = "cluster.spec.clusterConfig.addons"
# an addon's name names its ApplySet's parent Secret, `bke-addon-<name>` (bke.core.applyset)
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_C = "cluster.spec.clusterConfig.cluster"


@dataclass(frozen=True)
class BuiltIn:
    name: str  # the record name in bke:<cluster>:addons and `bke status`
    source: Literal["rendered", "fetched"]  # rendered by the renderer, or fetched from the httpRepo
    credential: Literal["super-admin", "admin"]  # the kubeconfig the dispatcher applies it with
    enabled: Callable[[Cluster], bool]
    switch: str  # the spec field that turns it off, for messages
    summary: str


BUILT_INS: tuple[BuiltIn, ...] = (
    # super-admin: the RBAC step creates the binding that gives admin.conf its rights, as kubeadm
    # uses super-admin.conf for exactly this at init (phases/kubeconfig EnsureAdminClusterRoleBinding)
    BuiltIn("rbac", "rendered", "super-admin", lambda c: True, "",
            "bootstrap ClusterRoleBindings kubeadm creates at init (bke.core.rbac)"),
    BuiltIn("kube-proxy", "rendered", "admin", lambda c: c.kube_proxy.enabled, "kubeProxy.enabled",
            "Service proxy, in kubeProxy.mode"),
    BuiltIn("calico", "fetched", "admin", lambda c: c.cni == "calico", "cni",
            "pod network: upstream's calico.yaml from the httpRepo, wired to the pod subnet"),
    BuiltIn("coredns", "rendered", "admin", lambda c: c.core_dns.enabled, "coreDNS.enabled", "cluster DNS"),
)
_BY_NAME = {b.name: b for b in BUILT_INS}


@dataclass(frozen=True)
class AddonStep:
    name: str
    version: str
    source: Source
    credential: Literal["super-admin", "admin"]
    path: str | None = None  # source "path": the folder of manifests
    # (kind, namespace, name) of a workload to wait ready for after applying, in real mode
    wait_for: tuple[str, str, str] | None = None


def _default_version(name: str, c: Cluster) -> str:
    k8s = parse_version(c.kubernetes_version)
    row = KUBERNETES[k8s.minor_key]
    return {"rbac": str(k8s), "kube-proxy": str(k8s), "calico": row.calico, "coredns": row.coredns}[name]


def _same_release(a: str, b: str) -> bool:
    try:
        return parse_version(a) == parse_version(b)
    except VersionError:
        return False


def addons_at(current: Cluster, target: Cluster, addons: list[Addon]) -> list[Addon]:
    """The spec's addons list for `target`'s versions, as an upgrade writes it: a built-in entry
    that names the version the current Kubernetes release would install anyway (kube-proxy at
    the Kubernetes version, CoreDNS and calico at the versions table's row) moves to the target's
    own, as kubeadm moves kube-proxy and CoreDNS with `kubeadm upgrade apply`. An entry that pins
    another version, or a folder of the user's own, stays as the user wrote it."""
    out = []
    for a in addons:
        if a.name in _BY_NAME and a.name != "rbac" and not a.path:
            try:
                follows = _same_release(a.version, _default_version(a.name, current))
            except (KeyError, VersionError):
                follows = False
            if follows:
                version = _default_version(a.name, target)
                a = a.model_copy(update={"version": spelled_like(a.version, version)})
        out.append(a)
    return out


def addon_steps(spec: ClusterSpec) -> list[AddonStep]:
    """The addons to apply, in order. Assumes a validated spec (a supported Kubernetes version)."""
    c = spec.config
    listed = {a.name: a for a in spec.cluster.spec.cluster_config.addons}
    out: list[AddonStep] = []
    for b in BUILT_INS:
        if not b.enabled(c):
            continue
        own = listed.get(b.name)
        version = own.version if own is not None else _default_version(b.name, c)
        wait = ("DaemonSet", "kube-system", "calico-node") if b.name == "calico" else None
        if own is not None and own.path:
            out.append(AddonStep(b.name, version, "path", b.credential, own.path, wait))
        else:
            out.append(AddonStep(b.name, version, b.source, b.credential, None, wait))
    for a in spec.cluster.spec.cluster_config.addons:
        if a.name in _BY_NAME and _BY_NAME[a.name].enabled(c):
            continue  # placed in its built-in's slot above
        out.append(AddonStep(a.name, a.version, "path", "admin", a.path))
    return out


def _kube_proxy_skew(spec: ClusterSpec, k8s: Version) -> list[FieldError]:
    """kube-proxy's version against the apiserver's, by Kubernetes' version skew policy
    (kubernetes.io/releases/version-skew-policy, kube-proxy): never newer than the apiserver,
    and at most three minor versions older."""
    for i, a in enumerate(spec.cluster.spec.cluster_config.addons):
        if a.name != "kube-proxy" or a.path:
            continue
        try:
            v = parse_version(a.version)
        except VersionError as e:
            return [FieldError(path=f"{_A}[{i}].version", message=str(e))]
        behind = (k8s.major - v.major) * 100 + k8s.minor - v.minor
        if (v.major, v.minor, v.patch) > (k8s.major, k8s.minor, k8s.patch):
            return [FieldError(path=f"{_A}[{i}].version", message=f"kube-proxy {v} is newer than the apiserver's "
                               f"{k8s}: the version skew policy allows kube-proxy the apiserver's version or older")]
        if behind > 3:
            return [FieldError(path=f"{_A}[{i}].version", message=f"kube-proxy {v} is {behind} minor versions behind "
                               f"the apiserver's {k8s}: the version skew policy allows at most 3")]
    return []


def check_addons(spec: ClusterSpec, warnings: list[str]) -> list[FieldError]:
    """The addon rules, each error naming its field; warnings for deprecated or risky choices."""
    c = spec.config
    errs: list[FieldError] = []
    seen: dict[str, int] = {}
    for i, a in enumerate(spec.cluster.spec.cluster_config.addons):
        if not _NAME.match(a.name):
            errs.append(FieldError(path=f"{_A}[{i}].name", message=f"{a.name!r} is not a DNS-1123 label (lowercase "
                                   "letters, digits and '-', at most 63): it names the Secret bke-addon-<name> that "
                                   "records the addon's objects"))
        if a.name in seen:
            errs.append(FieldError(path=f"{_A}[{i}].name", message=f"{a.name!r} is listed twice (also addons[{seen[a.name]}])"))
        seen.setdefault(a.name, i)
        b = _BY_NAME.get(a.name)
        if b is not None and b.name == "rbac":
            errs.append(FieldError(path=f"{_A}[{i}].name", message="'rbac' is BKE's bootstrap RBAC step; it cannot be "
                                                                      "replaced: name your addon differently"))
        elif b is not None and not a.path and not b.enabled(c):
            errs.append(FieldError(path=f"{_A}[{i}]", message=f"built-in {a.name!r} is turned off by {_C}.{b.switch}; "
                                   "give a 'path' to apply your own manifests under this name"))
        elif b is None and not a.path:
            errs.append(FieldError(path=f"{_A}[{i}].path", message=f"{a.name!r} is not built in "
                                   f"({', '.join(_BY_NAME)}): give the folder of its manifests"))
    try:
        k8s = parse_version(c.kubernetes_version)
    except VersionError:
        return errs  # reported by the version check
    errs += _kube_proxy_skew(spec, k8s)
    mode = c.kube_proxy.mode
    if c.kube_proxy.enabled and mode == "ipvs" and k8s.at_least("1.35.0"):
        # KEP-5495 (kubernetes/enhancements): ipvs deprecated in 1.35 (kubernetes#134539), a
        # KubeProxyIPVS gate from 1.37 (kubernetes#139397), planned off by default in 1.40.
        warnings.append(f"{_C}.kubeProxy.mode: ipvs is deprecated from Kubernetes 1.35 (KEP-5495) and planned to be "
                        "off by default in 1.40; nftables is its replacement")
    if c.kube_proxy.enabled and mode == "nftables" and c.cni == "calico" and k8s.minor_key in KUBERNETES:
        calico = parse_version(KUBERNETES[k8s.minor_key].calico)
        if not calico.at_least("3.31.0"):
            warnings.append(f"{_C}.kubeProxy.mode: nftables with Kubernetes {k8s.minor_key} installs calico {calico}, whose "
                            "nftables data plane BKE has not verified (documented here from calico 3.31)")
    if not c.kube_proxy.enabled and c.cni == "calico":
        warnings.append(f"{_C}.kubeProxy.enabled: false with cni calico: calico's iptables and nftables data planes "
                        "need kube-proxy; only its eBPF data plane replaces it, which BKE does not configure")
    return errs
