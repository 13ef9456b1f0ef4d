"""extraArgs: the merge order, the denylist and its escape hatch, and stable flag output.

Merge order, per flag (a later layer replaces one flag and keeps the others):

    built-in defaults < size presets < cluster extraArgs < node extraArgs

`feature-gates` is merged per gate, so a user gate does not drop the ones BKE sets.
The output is sorted by flag name: the same input always gives the same bytes (the original's
manifests churned because its map was iterated unsorted).

The denylist refuses flags that would break the product's security or placement (certificate
paths owned by the certs service, etcd endpoints computed by the planner, anonymous or
AlwaysAllow access...). `allowUnsafeFlags` in the cluster spec is the documented escape hatch:
an entry `flag` allows that flag for every component, `component/flag` for one component.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..spec.models import ClusterSpec
from .gates import VersionSet, gate_for, gate_open

__all__ = [
    "COMPONENT_FIELDS",
    "DENYLIST",
    "DenyRule",
    "check_extra_args",
    "format_flags",
    "merge_args",
]

# Plan component -> (spec attribute, camelCase field) of its extraArgs.
COMPONENT_FIELDS: dict[str, tuple[str, str]] = {
    "kube-apiserver": ("api_server", "apiServer"),
    "kube-controller-manager": ("controller_manager", "controllerManager"),
    "kube-scheduler": ("scheduler", "scheduler"),
    "etcd-data": ("etcd", "etcd"),
    "etcd-events": ("etcd_events", "etcdEvents"),
    "etcd-pods": ("etcd_pods", "etcdPods"),
    "kubelet": ("kubelet", "kubelet"),
}


@dataclass(frozen=True)
class DenyRule:
    component: str  # family: kube-apiserver, kube-controller-manager, kube-scheduler, etcd, kubelet
    flag: str
    reason: str
    bad_values: tuple[str, ...] = ()  # empty: any value is refused; else only these (per comma item)

    def refuses(self, value: str) -> bool:
        if not self.bad_values:
            return True
        items = {i.strip().lower() for i in value.split(",")}
        return any(b.lower() in items for b in self.bad_values)


_CERTS = "certificate and key paths are owned by the certs service (bke certs)"
_ETCD_PLACE = "etcd endpoints are computed by the planner from the etcd roles"
_MEMBER = "etcd membership and listeners come from the plan (ports, probes and peers depend on them)"
_KCONF = "kubeconfig paths are owned by the certs service"


def _rules(component: str, reason: str, *flags: str) -> tuple[DenyRule, ...]:
    return tuple(DenyRule(component, f, reason) for f in flags)


DENYLIST: tuple[DenyRule, ...] = (
    *_rules("kube-apiserver", _ETCD_PLACE, "etcd-servers", "etcd-servers-overrides"),
    *_rules("kube-apiserver", _CERTS, "etcd-cafile", "etcd-certfile", "etcd-keyfile", "client-ca-file", "tls-cert-file",
            "tls-private-key-file", "kubelet-client-certificate", "kubelet-client-key", "proxy-client-cert-file",
            "proxy-client-key-file", "requestheader-client-ca-file", "service-account-key-file",
            "service-account-signing-key-file"),
    *_rules("kube-apiserver", "placement: haproxy backends, probes and certificates use the node address and port 6443",
            "advertise-address", "secure-port"),
    DenyRule("kube-apiserver", "anonymous-auth", "anonymous requests would reach every API not covered by RBAC", ("true",)),
    DenyRule("kube-apiserver", "authorization-mode", "AlwaysAllow disables authorization", ("AlwaysAllow",)),
    *_rules("kube-controller-manager", _KCONF, "kubeconfig", "authentication-kubeconfig", "authorization-kubeconfig"),
    *_rules("kube-controller-manager", _CERTS, "cluster-signing-cert-file", "cluster-signing-key-file", "root-ca-file",
            "service-account-private-key-file", "client-ca-file", "requestheader-client-ca-file"),
    *_rules("kube-controller-manager", "the liveness probe uses this port", "secure-port"),
    *_rules("kube-scheduler", _KCONF, "kubeconfig", "authentication-kubeconfig", "authorization-kubeconfig"),
    *_rules("kube-scheduler", "the liveness probe uses this port", "secure-port"),
    *_rules("etcd", _MEMBER, "name", "data-dir", "initial-cluster", "initial-advertise-peer-urls",
            "advertise-client-urls", "listen-client-urls", "listen-peer-urls", "listen-metrics-urls"),
    *_rules("etcd", _CERTS, "cert-file", "key-file", "trusted-ca-file", "peer-cert-file", "peer-key-file",
            "peer-trusted-ca-file"),
    DenyRule("etcd", "client-cert-auth", "etcd would accept clients without a certificate", ("false",)),
    DenyRule("etcd", "peer-client-cert-auth", "etcd would accept peers without a certificate", ("false",)),
    DenyRule("etcd", "auto-tls", "self-signed certificates bypass the cluster CA", ("true",)),
    DenyRule("etcd", "peer-auto-tls", "self-signed certificates bypass the cluster CA", ("true",)),
    *_rules("kubelet", _KCONF, "kubeconfig", "bootstrap-kubeconfig", "config"),
    *_rules("kubelet", _CERTS, "client-ca-file", "tls-cert-file", "tls-private-key-file"),
    *_rules("kubelet", "placement: the node's name and address come from the plan", "hostname-override", "node-ip"),
    DenyRule("kubelet", "anonymous-auth", "anonymous requests to the kubelet API (exec, logs)", ("true",)),
    DenyRule("kubelet", "authorization-mode", "AlwaysAllow disables kubelet authorization", ("AlwaysAllow",)),
)


def _family(component: str) -> str:
    return "etcd" if component.startswith("etcd") else component


def _split_gates(value: str) -> dict[str, str]:
    out = {}
    for item in value.split(","):
        if item.strip():
            k, _, v = item.partition("=")
            out[k.strip()] = v.strip()
    return out


def merge_args(*layers: Mapping[str, str]) -> dict[str, str]:
    """Merge flag layers, later wins per flag; `feature-gates` merges per gate (sorted)."""
    out: dict[str, str] = {}
    gates: dict[str, str] = {}
    for layer in layers:
        for name, value in layer.items():
            if name == "feature-gates":
                gates.update(_split_gates(value))
            else:
                out[name] = value
    if gates:
        out["feature-gates"] = ",".join(f"{k}={v}" for k, v in sorted(gates.items()))
    return out


def format_flags(args: Mapping[str, str]) -> list[str]:
    """`--name=value`, sorted by name: stable bytes for the same input."""
    return [f"--{k}={args[k]}" for k in sorted(args)]


def check_extra_args(spec: ClusterSpec, versions: VersionSet, components: Iterable[str]) -> tuple[list[tuple[str, str]], list[str]]:
    """Denylist and version gates of every user flag: (errors with field paths, warnings).

    Only components the plan actually places are checked (flags of absent etcd clusters are inert).
    """
    allowed = set(spec.config.allow_unsafe_flags)
    used: set[str] = set()
    errors: list[tuple[str, str]] = []
    warnings: list[str] = []
    layers: list[tuple[str, str, dict[str, str]]] = []
    for comp in components:
        attr, field = COMPONENT_FIELDS[comp]
        layers.append((comp, f"cluster.spec.clusterConfig.cluster.{field}", dict(getattr(spec.config, attr).extra_args)))
        for i, n in enumerate(spec.nodes):
            node_comp = getattr(n.spec, attr)
            if node_comp is not None:
                layers.append((comp, f"nodes[{i}].spec.{field}", dict(node_comp.extra_args)))
    for comp, prefix, args in layers:
        fam = _family(comp)
        for flag, value in sorted(args.items()):
            path = f"{prefix}.extraArgs.{flag}"
            keys = {flag, f"{fam}/{flag}", f"{comp}/{flag}"}
            problem = _denied(fam, flag, value) or _outside_gate(comp, flag, value, versions)
            if problem is None:
                continue
            hit = keys & allowed
            if hit:
                used |= hit
                warnings.append(f"{path}: allowed by allowUnsafeFlags although {problem}")
            else:
                errors.append((path, f"{problem}; list {flag!r} in allowUnsafeFlags if you know better"))
    for entry in sorted(allowed - used):
        warnings.append(f"cluster.spec.clusterConfig.cluster.allowUnsafeFlags: {entry!r} allowed nothing (no such refused flag in extraArgs)")
    return errors, warnings


def _denied(family: str, flag: str, value: str) -> str | None:
    for rule in DENYLIST:
        if rule.component == family and rule.flag == flag and rule.refuses(value):
            shown = f"--{flag}={value}" if rule.bad_values else f"--{flag}"
            return f"{shown} is refused: {rule.reason}"
    return None


def _outside_gate(component: str, flag: str, value: str, versions: VersionSet) -> str | None:
    fam = _family(component)
    v = versions.of(fam)
    rows = gate_for(component, "flag", flag)
    if rows and not gate_open(component, "flag", flag, versions):
        instead = next((g.instead for g in rows if g.instead), "")
        return f"{fam} {v} does not take --{flag} (BKE gate: {rows[0].range_text})" + (f"; use {instead}" if instead else "")
    if flag == "feature-gates":
        for gate in _split_gates(value):
            grows = gate_for(component, "feature-gate", gate)
            if grows and not gate_open(component, "feature-gate", gate, versions):
                instead = next((g.instead for g in grows if g.instead), "")
                return f"{fam} {v} does not take feature gate {gate} (BKE gate: {grows[0].range_text})" + (f"; use {instead}" if instead else "")
    return None
