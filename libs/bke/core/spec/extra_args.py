"""User extraArgs judged against the denylist, the version gates, the flag table and each value's
type (bke.core.flagrules.value_check): one implementation.

`validate_spec` calls it, so the planner service and `bke plan` refuse a spec at plan time with
the field path of every refused flag; the renderer calls it again before rendering, as a second
line of defence for plans that did not come through validation.

`allowUnsafeFlags` in the cluster spec is the documented escape hatch: an entry `flag` allows
that flag for every component, `component/flag` for one component. Each use is a warning.
"""
from __future__ import annotations

import re
from collections.abc import Iterable

from bke.core.flagrules import DENYLIST, VersionSet, family_of, flag_verdict, gate_for, gate_open
from bke.core.flagrules.value_check import value_problem
from .models import ClusterSpec
from .roles import ETCD_ROLES, is_master

__all__ = ["FLAG_NAME", "COMPONENT_FIELDS", "check_extra_args", "placed_flag_components", "split_gates"]

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
_C = "cluster.spec.clusterConfig.cluster"
# A plain flag name; anything else is refused by validate_spec on its own, so the flag table is
# not asked about it (one error per malformed name, not two).
FLAG_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]*(\.[A-Za-z0-9-]+)*$")


def placed_flag_components(spec: ClusterSpec) -> list[str]:
    """The components of COMPONENT_FIELDS the placement will run, read from the roles alone
    (the same rules as `bke.core.plan.placement`): flags of an etcd cluster nobody runs are inert."""
    roles = {r for n in spec.nodes for r in n.spec.role}
    out = ["kube-apiserver", "kube-controller-manager", "kube-scheduler"] if any(is_master(n.spec.role) for n in spec.nodes) else []
    out += [cluster for role, cluster in ETCD_ROLES.items() if role in roles or cluster == "etcd-data"]
    return [c for c in COMPONENT_FIELDS if c in out or c == "kubelet"]


def split_gates(value: str) -> dict[str, str]:
    """`A=true,B=false` -> {A: true, B: false} (the feature-gates flag syntax)."""
    out = {}
    for item in value.split(","):
        if item.strip():
            k, _, v = item.partition("=")
            out[k.strip()] = v.strip()
    return out


def check_extra_args(spec: ClusterSpec, versions: VersionSet | None,
                     components: Iterable[str]) -> tuple[list[tuple[str, str]], list[str]]:
    """Denylist and version gates of every user flag of `components`: (errors with field paths,
    warnings). Without `versions` (they failed their own validation) only the denylist runs."""
    allowed = set(spec.config.allow_unsafe_flags)
    used: set[str] = set()
    errors: list[tuple[str, str]] = []
    warnings: list[str] = []
    layers: list[tuple[str, str, dict[str, str]]] = []
    for comp in components:
        attr, field = COMPONENT_FIELDS[comp]
        layers.append((comp, f"{_C}.{field}", dict(getattr(spec.config, attr).extra_args)))
        for i, n in enumerate(spec.nodes):
            node_comp = getattr(n.spec, attr)
            if node_comp is not None:
                layers.append((comp, f"nodes[{i}].spec.{field}", dict(node_comp.extra_args)))
    for comp, prefix, args in layers:
        fam = family_of(comp)
        for flag, value in sorted(args.items()):
            path = f"{prefix}.extraArgs.{flag}"
            keys = {flag, f"{fam}/{flag}", f"{comp}/{flag}"}
            problem = _denied(fam, flag, value) or (_outside_gate(comp, flag, value, versions) if versions else None)
            if problem is None and versions is not None and FLAG_NAME.match(flag):
                # the flag table: unknown, removed or not yet added in this version (an error),
                # deprecated (a warning that allowUnsafeFlags does not silence)
                verdict = flag_verdict(fam, flag, versions.of(fam))
                if not verdict.ok:
                    problem = verdict.message
                else:
                    if verdict.deprecated:
                        warnings.append(f"{path}: {verdict.message}")
                    # the value, by the type the component parses it as (a refusal at start otherwise)
                    problem = value_problem(fam, flag, value, versions.of(fam))
            if problem is None:
                continue
            hit = keys & allowed
            if hit:
                used |= hit
                warnings.append(f"{path}: allowed by allowUnsafeFlags although {problem}")
            else:
                errors.append((path, f"{problem}; list {flag!r} in allowUnsafeFlags if you know better"))
    for entry in sorted(allowed - used):
        warnings.append(f"{_C}.allowUnsafeFlags: {entry!r} allowed nothing (no such refused flag in extraArgs)")
    return errors, warnings


def _denied(family: str, flag: str, value: str) -> str | None:
    for rule in DENYLIST:
        if rule.component == family and rule.flag == flag:
            problem = rule.problem(value)
            if problem is not None:
                return f"{problem}: {rule.reason}"
    return None


def _outside_gate(component: str, flag: str, value: str, versions: VersionSet) -> str | None:
    fam = family_of(component)
    v = versions.of(fam)
    rows = gate_for(component, "flag", flag)
    if rows and not gate_open(component, "flag", flag, versions):
        instead = next((g.instead for g in rows if g.instead), "")
        return f"{fam} {v} does not take --{flag} (BKE gate: {rows[0].range_text})" + (f"; use {instead}" if instead else "")
    if flag == "feature-gates":
        for gate in split_gates(value):
            grows = gate_for(component, "feature-gate", gate)
            if grows and not gate_open(component, "feature-gate", gate, versions):
                instead = next((g.instead for g in grows if g.instead), "")
                return f"{fam} {v} does not take feature gate {gate} (BKE gate: {grows[0].range_text})" + (f"; use {instead}" if instead else "")
    return None
