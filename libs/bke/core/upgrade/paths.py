"""Version path rules: which (current plan, target) pairs an upgrade may take, as data.

Every rule is mandatory (no `--ignore-check` lifts it) and returns the reason it refuses, or
None. The target's unnamed versions default to the versions table's pairing (`resolve_target`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from bke.core import versions
from bke.core.plan import Plan
from bke.core.versions import Version, VersionError, parse_version
from .order import Change

__all__ = [
    "ETCD_MIN_PATCH",
    "MAX_KUBERNETES_MINOR_STEP",
    "PATH_RULES",
    "EtcdMinPatch",
    "PathRule",
    "Target",
    "UpgradeRequestError",
    "change_of",
    "path_findings",
    "resolve_target",
]

# kubeadm upgrades one Kubernetes minor at a time: kubernetes/kubernetes
# cmd/kubeadm/app/phases/upgrade/policy.go (read at commit 04791b49), EnforceVersionPolicies:
# MaximumAllowedMinorVersionUpgradeSkew = 1, a larger jump is a Mandatory error for a released
# version (a Skippable one for a pre-release; BKE keeps it mandatory for both). kubeadm also
# allows a one-minor downgrade (MaximumAllowedMinorVersionDowngradeSkew); BKE allows none (product
# decision: etcd's data and the apiserver's stored objects do not follow a downgrade).
MAX_KUBERNETES_MINOR_STEP = 1


@dataclass(frozen=True)
class EtcdMinPatch:
    """Before a cluster moves to etcd `minor`, every member must run at least `minimum`."""

    minor: str
    minimum: str
    source: str  # the page and the revision the minimum was read from


# etcd's own upgrade guide for 3.6, etcd-io/website content/en/docs/v3.6/upgrades/upgrade_3_6.md,
# "Update 3.5" checklist item. The minimum has moved with each revision of that page: 3.5.20
# (commit 9889a83b, 2025-05-09: "too many learner member", etcd-io/etcd#19557), 3.5.24 (0d8f7726,
# 2025-11-13, etcd-io/etcd#20793), 3.5.26 (837f7ddd, 2025-12-17: zombie members), 3.5.32 (5a5c2009,
# 2026-08-03; restated by 9acb6b48, 2026-08-14, the newest revision read here). Move the row
# with the page.
ETCD_MIN_PATCH: dict[str, EtcdMinPatch] = {
    r.minor: r
    for r in (
        EtcdMinPatch("3.6", "3.5.32", "etcd-io/website content/en/docs/v3.6/upgrades/upgrade_3_6.md at 9acb6b48"),
    )
}


class UpgradeRequestError(ValueError):
    """A request that cannot be read (a malformed version): names the field, as spec errors do."""


@dataclass(frozen=True)
class Target:
    kubernetes: Version
    etcd: Version
    containerd: Version
    # The etcd clusters the target plan has (names): the current plan's unless the request carries
    # a new spec. Compared by the SplitUnchanged rule.
    etcd_clusters: tuple[str, ...] = field(default=())


def _version(flag: str, text: str) -> Version:
    try:
        return parse_version(text)
    except VersionError as exc:
        raise UpgradeRequestError(f"{flag}: {exc}") from None


def resolve_target(
    current: Plan,
    to: str,
    etcd: str | None = None,
    containerd: str | None = None,
    etcd_clusters: tuple[str, ...] | None = None,
) -> Target:
    """The full target: etcd defaults to the target minor's row of the versions table (never
    below the running etcd), containerd to the running one."""
    k8s = _version("--to", to)
    if etcd is not None:
        etcd_v = _version("--etcd-version", etcd)
    else:
        running = parse_version(current.etcd_version)
        row = versions.KUBERNETES.get(k8s.minor_key)
        etcd_v = max(parse_version(row.etcd), running) if row else running
    containerd_v = _version("--containerd-version", containerd) if containerd else parse_version(current.containerd_version)
    clusters = etcd_clusters if etcd_clusters is not None else tuple(c.name for c in current.etcd_clusters)
    return Target(k8s, etcd_v, containerd_v, clusters)


def _mt(v: Version) -> tuple[int, int]:
    return v.major, v.minor


def _supported(p: Plan, t: Target) -> str | None:
    bad = []
    for component, v in (("kubernetes", t.kubernetes), ("etcd", t.etcd), ("containerd", t.containerd)):
        try:
            versions.check_supported(component, str(v))
        except VersionError as exc:
            bad.append(str(exc))
    return "; ".join(bad) or None


def _no_downgrade(component: str, current: Callable[[Plan], str], target: Callable[[Target], Version]) -> Callable[[Plan, Target], str | None]:
    def rule(p: Plan, t: Target) -> str | None:
        cur, new = parse_version(current(p)), target(t)
        if _mt(new) < _mt(cur) or (_mt(new) == _mt(cur) and new.patch < cur.patch):
            return f"{component} {new} is older than the running {cur}: downgrades are not supported"
        return None
    return rule


def _k8s_one_minor(p: Plan, t: Target) -> str | None:
    cur = parse_version(p.kubernetes_version)
    new = t.kubernetes
    if new.major != cur.major or new.minor > cur.minor + MAX_KUBERNETES_MINOR_STEP:
        nxt = f"{cur.major}.{cur.minor + 1}"
        return (f"Kubernetes {cur} to {new} skips a minor: upgrade one minor at a time "
                f"(first to a {nxt} release), as kubeadm's upgrade policy requires")
    return None


def _etcd_one_minor(p: Plan, t: Target) -> str | None:
    cur = parse_version(p.etcd_version)
    new = t.etcd
    if new.major != cur.major or new.minor > cur.minor + 1:
        return f"etcd {cur} to {new} skips a minor: etcd upgrades one minor at a time (its upgrade guides)"
    return None


def _etcd_min_patch(p: Plan, t: Target) -> str | None:
    cur = parse_version(p.etcd_version)
    row = ETCD_MIN_PATCH.get(t.etcd.minor_key)
    if row is None or cur.minor_key == t.etcd.minor_key or cur.at_least(row.minimum):
        return None
    return (f"etcd {cur} to {t.etcd}: every member must run {row.minimum} or later before moving to "
            f"{row.minor} (source: {row.source}); upgrade etcd to {row.minimum} first (--etcd-version {row.minimum} "
            f"with the running Kubernetes version)")


def _containerd_host(p: Plan, t: Target) -> str | None:
    # The same pairing rule the spec validator applies to a new install (bke.core.versions.host_rule_errors).
    return "; ".join(versions.host_rule_errors(t.kubernetes, t.containerd)) or None


def _split_unchanged(p: Plan, t: Target) -> str | None:
    before = tuple(sorted(c.name for c in p.etcd_clusters))
    after = tuple(sorted(t.etcd_clusters))
    if not t.etcd_clusters or before == after:
        return None
    word = {True: "split", False: "non-split"}
    return (f"the etcd layout changes from {word[len(before) > 1]} ({', '.join(before)}) to "
            f"{word[len(after) > 1]} ({', '.join(after)}): an upgrade never turns a non-split cluster into a "
            "split one or back")


@dataclass(frozen=True)
class PathRule:
    name: str
    summary: str
    check: Callable[[Plan, Target], str | None]


PATH_RULES: tuple[PathRule, ...] = (
    PathRule("TargetSupported", "every target version is in the versions table (bke versions)", _supported),
    PathRule("KubernetesNoDowngrade", "the Kubernetes target is not older than the running one",
             _no_downgrade("Kubernetes", lambda p: p.kubernetes_version, lambda t: t.kubernetes)),
    PathRule("KubernetesOneMinor", "one Kubernetes minor at a time (kubeadm upgrade policy)", _k8s_one_minor),
    PathRule("EtcdNoDowngrade", "the etcd target is not older than the running one",
             _no_downgrade("etcd", lambda p: p.etcd_version, lambda t: t.etcd)),
    PathRule("EtcdOneMinor", "one etcd minor at a time (etcd upgrade guides)", _etcd_one_minor),
    PathRule("EtcdMinimumPatch", "the minimum patch etcd's guide requires before the next minor", _etcd_min_patch),
    PathRule("ContainerdNoDowngrade", "the containerd target is not older than the running one",
             _no_downgrade("containerd", lambda p: p.containerd_version, lambda t: t.containerd)),
    PathRule("ContainerdSupported", "containerd is supported by the target Kubernetes minor", _containerd_host),
    PathRule("SplitUnchanged", "no non-split to split etcd change or back", _split_unchanged),
)


def path_findings(current: Plan, target: Target) -> list[tuple[str, str]]:
    """(rule name, reason) for every rule the request breaks, in table order."""
    out = []
    for rule in PATH_RULES:
        reason = rule.check(current, target)
        if reason:
            out.append((rule.name, reason))
    return out


def change_of(current: Plan, target: Target) -> Change:
    """What the target changes, as the order's steps read it."""
    return Change(
        kubernetes=parse_version(current.kubernetes_version) != target.kubernetes,
        etcd=parse_version(current.etcd_version) != target.etcd,
        containerd=parse_version(current.containerd_version) != target.containerd,
    )
