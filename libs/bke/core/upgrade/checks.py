"""Upgrade pre-checks: one pure function from (current plan, target, facts) to a report.

The shape is kubeadm's (cmd/kubeadm/app/phases/upgrade/policy.go: VersionSkewPolicyErrors with
Mandatory and Skippable lists; `kubeadm upgrade apply --ignore-preflight-errors`): a finding is
mandatory (refuses the upgrade whatever the flags), skippable (refuses it unless named in
`--ignore-check`), or a notice (says what the upgrade will do, refuses nothing). Naming a
mandatory or unknown check in `--ignore-check` is itself an error.

Facts a live cluster supplies (health, agents, certificate expiry) are None when unknown: the
check is then listed as not checked instead of guessed.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Iterable, Mapping

from bke.core import versions
from bke.core.plan import Plan
from bke.core.spec.host_rules import FAIL_CGROUPV1, kubelet_args
from bke.core.flagrules import go_bool
from .certificates import renewed_instances
from .order import expand_order
from .paths import PATH_RULES, Target, change_of, path_findings

__all__ = ["CHECKS", "Facts", "Finding", "Report", "upgrade_findings"]

MANDATORY, SKIPPABLE, NOTICE = "mandatory", "skippable", "notice"

# Check name -> kind. Path rules are all mandatory; the others come from facts.
CHECKS: dict[str, str] = {
    **{r.name: MANDATORY for r in PATH_RULES},
    "ClusterHealthy": MANDATORY,
    "AgentsAliveEtcd": MANDATORY,  # an etcd member left out would leave its cluster on mixed versions
    "AgentsAlive": SKIPPABLE,
    "CgroupV2": MANDATORY,
    "CertificatesExpiry": SKIPPABLE,
}


@dataclass(frozen=True)
class Facts:
    """What only the live cluster knows. None: not known (e.g. `bke upgrade plan` offline)."""

    now: datetime | None = None
    healthy: bool | None = None
    health_reason: str = ""
    agents_alive: frozenset[str] | None = None
    # certificate instance id (`apiserver@m1`, `ca`) -> notAfter (aware datetimes)
    cert_expiry: Mapping[str, datetime] | None = None
    # hosts whose node preflight saw cgroup v1
    cgroup_v1_hosts: frozenset[str] | None = None
    # how long the upgrade may take, for the certificate check
    upgrade_duration: timedelta = timedelta(hours=24)
    # kubeadm renews certificates during an upgrade unless told --certificate-renewal=false
    renew_certificates: bool = True


@dataclass(frozen=True)
class Finding:
    name: str
    message: str
    kind: str  # mandatory | skippable | notice
    nodes: tuple[str, ...] = ()

    @property
    def skippable(self) -> bool:
        return self.kind == SKIPPABLE


@dataclass(frozen=True)
class Report:
    findings: tuple[Finding, ...]
    ignored: tuple[str, ...] = ()  # skippable findings the request ignored
    errors: tuple[str, ...] = ()  # a bad --ignore-check
    left_out: tuple[str, ...] = ()  # nodes the upgrade skips (dead agents, ignored)
    not_checked: tuple[str, ...] = ()  # checks whose facts were not known

    @property
    def blocking(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings
                     if f.kind == MANDATORY or (f.kind == SKIPPABLE and f.name not in self.ignored))

    @property
    def refused(self) -> bool:
        return bool(self.errors or self.blocking)

    def reasons(self) -> list[str]:
        out = list(self.errors)
        for f in self.blocking:
            hint = f" (skippable: --ignore-check {f.name})" if f.skippable else ""
            out.append(f"[{f.name}] {f.message}{hint}")
        return out


def _ignore_errors(ignore: Iterable[str]) -> list[str]:
    out = []
    for name in ignore:
        kind = CHECKS.get(name)
        if kind is None:
            out.append(f"--ignore-check {name}: no such check; skippable checks are "
                       + ", ".join(n for n, k in CHECKS.items() if k == SKIPPABLE))
        elif kind == MANDATORY:
            out.append(f"--ignore-check {name}: {name} is mandatory and cannot be ignored")
    return out


def _etcd_hosts(plan: Plan) -> set[str]:
    return {m.hostname for c in plan.etcd_clusters for m in c.members}


def _fact_findings(plan: Plan, target: Target, facts: Facts) -> tuple[list[Finding], list[str]]:
    found: list[Finding] = []
    unknown: list[str] = []
    # ClusterHealthy: etcd and apiservers answer; an unhealthy cluster is never upgraded.
    if facts.healthy is None:
        unknown.append("ClusterHealthy")
    elif not facts.healthy:
        found.append(Finding("ClusterHealthy", f"the cluster is not healthy: {facts.health_reason or 'no reason given'}",
                             MANDATORY))
    # AgentsAlive: a node whose agent does not answer cannot be upgraded now.
    if facts.agents_alive is None:
        unknown.append("AgentsAlive")
    else:
        dead = [n.hostname for n in plan.nodes if n.hostname not in facts.agents_alive]
        etcd = _etcd_hosts(plan)
        on_etcd = tuple(h for h in dead if h in etcd)
        rest = tuple(h for h in dead if h not in etcd)
        if on_etcd:
            found.append(Finding("AgentsAliveEtcd", f"{len(on_etcd)} etcd member node(s) have no live agent: "
                                 f"{_names(on_etcd)}; an etcd cluster is upgraded whole", MANDATORY, on_etcd))
        if rest:
            found.append(Finding("AgentsAlive", f"{len(rest)} node(s) have no live agent: {_names(rest)}; ignored, "
                                 "they are left out and upgraded later with `bke retry --nodes`", SKIPPABLE, rest))
    # CgroupV2: from 1.35 the kubelet refuses cgroup v1 hosts unless the spec opts out.
    if versions.cgroup_v1_refused(target.kubernetes):
        if facts.cgroup_v1_hosts is None:
            unknown.append("CgroupV2")
        else:
            refused = tuple(h for h in sorted(facts.cgroup_v1_hosts)
                            if go_bool(kubelet_args(plan.spec, h).get(FAIL_CGROUPV1, "")) is not False)
            if refused:
                found.append(Finding("CgroupV2", f"the kubelet of {target.kubernetes.minor_key} refuses cgroup v1 hosts "
                                     f"({versions.CGROUP_V1_FAILS_FROM}+): {_names(refused)}", MANDATORY, refused))
    # CertificatesExpiry: a certificate that expires before the upgrade could finish. With
    # renewal on, the ones this upgrade renews are a notice; any other (a CA, kubelet.conf, a
    # node left out: bke.core.upgrade.certificates) refuses like with renewal off.
    if facts.cert_expiry is None or facts.now is None:
        unknown.append("CertificatesExpiry")
    else:
        deadline = facts.now + facts.upgrade_duration
        when = deadline.isoformat(timespec="minutes")
        soon = tuple(sorted(n for n, t in facts.cert_expiry.items() if t <= deadline))
        renewed = _renewed(plan, target, facts) if soon and facts.renew_certificates else frozenset()
        notice = tuple(n for n in soon if n in renewed)
        kept = tuple(n for n in soon if n not in renewed)
        if notice:
            found.append(Finding("CertificatesExpiry", f"{len(notice)} certificate(s) expire before {when}: "
                                 f"{_names(notice)}; they are renewed as part of the upgrade", NOTICE))
        if kept:
            why = ("renewal is off" if not facts.renew_certificates
                   else "the upgrade does not renew them (renew with `bke certs renew` first)")
            found.append(Finding("CertificatesExpiry", f"{len(kept)} certificate(s) expire before {when} "
                                 f"and {why}: {_names(kept)}", SKIPPABLE, kept))
    return found, unknown


def _renewed(plan: Plan, target: Target, facts: Facts) -> frozenset[str]:
    """The certificate instances this upgrade renews (nodes without a live agent are left out)."""
    dead = () if facts.agents_alive is None else [n.hostname for n in plan.nodes if n.hostname not in facts.agents_alive]
    change = replace(change_of(plan, target), certificates=True)
    return frozenset(renewed_instances(plan, expand_order(plan, change, None, dead)))


def _names(items: tuple[str, ...], limit: int = 5) -> str:
    head = ", ".join(items[:limit])
    return head + (f" and {len(items) - limit} more" if len(items) > limit else "")


def upgrade_findings(current_plan: Plan, target: Target, facts: Facts, ignore: Iterable[str] = ()) -> Report:
    """Every finding for this request, the ignore list applied. Pure: facts carry `now`."""
    ignore = tuple(dict.fromkeys(ignore))
    findings = [Finding(name, reason, MANDATORY) for name, reason in path_findings(current_plan, target)]
    more, unknown = _fact_findings(current_plan, target, facts)
    findings += more
    ignored = tuple(f.name for f in findings if f.skippable and f.name in ignore)
    left_out = tuple(h for f in findings if f.name == "AgentsAlive" and f.name in ignored for h in f.nodes)
    return Report(tuple(findings), ignored, tuple(_ignore_errors(ignore)), left_out, tuple(unknown))
