"""Which versions accept which flag, feature gate or endpoint: one table, read by spec
validation (user extraArgs), the renderer (what it emits), the docs and the tests.

A row says "BKE emits (and accepts from extraArgs) NAME of COMPONENT for versions in
[since, until)". Bounds are full versions, so a flag that appeared in a patch release is gated to
that patch (etcd 3.5.5 added the compact-hash check; 3.5.11 added /livez and /readyz). A name with
no row is accepted by every supported version. Every row names the upstream source it comes from.

etcd 3.6 renamed the `--experimental-*` flags (kept as deprecated aliases until 3.7): we stop
emitting the old name at 3.6.0 and emit the new flag or feature gate instead, so both spellings
appear here as two rows with adjacent ranges.
"""
from __future__ import annotations

from dataclasses import dataclass

from bke.core.versions import Version, parse_version

__all__ = [
    "GATES",
    "Gate",
    "VersionSet",
    "family_of",
    "gate_for",
    "gate_open",
]


@dataclass(frozen=True)
class VersionSet:
    """The three versions a cluster's files depend on."""

    kubernetes: Version
    etcd: Version
    containerd: Version

    def of(self, family: str) -> Version:
        return {"etcd": self.etcd, "containerd": self.containerd}.get(family, self.kubernetes)


def family_of(component: str) -> str:
    """etcd-data/-events/-pods share etcd's gates; everything else is gated by its own name."""
    return "etcd" if component.startswith("etcd") else component


@dataclass(frozen=True)
class Gate:
    component: str  # family: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet
    kind: str  # "flag" | "feature-gate" | "endpoint"
    name: str
    since: str | None  # first version that has it (inclusive)
    until: str | None  # first version where BKE stops using it (exclusive)
    source: str
    instead: str = ""  # what to use outside the range

    def covers(self, v: Version) -> bool:
        key = (v.major, v.minor, v.patch)
        if self.since is not None:
            s = parse_version(self.since)
            if key < (s.major, s.minor, s.patch):
                return False
        if self.until is not None:
            u = parse_version(self.until)
            if key >= (u.major, u.minor, u.patch):
                return False
        return True

    @property
    def range_text(self) -> str:
        if self.since and self.until:
            return f">= {self.since}, < {self.until}"
        if self.since:
            return f">= {self.since}"
        return f"< {self.until}" if self.until else "all"


_ETCD35 = "etcd CHANGELOG-3.5.md"
_ETCD36 = "etcd 3.6 server/features (ExperimentalFlagToFeatureMap) and CHANGELOG-3.6.md"
_KFEAT = "k8s.io/apiserver/pkg/features/kube_features.go (versioned feature specs)"

GATES: tuple[Gate, ...] = (
    # etcd: probe endpoints
    Gate("etcd", "endpoint", "/livez", "3.5.11", None, f"{_ETCD35} v3.5.11 'Add livez/readyz HTTP endpoints' (etcd PR 17039)", "/health?exclude=NOSPACE&serializable=true"),
    Gate("etcd", "endpoint", "/readyz", "3.5.11", None, f"{_ETCD35} v3.5.11 (etcd PR 17039); kubeadm switched in 1.31 (k/k PR 124465)", "/health?serializable=false"),
    # etcd: flags renamed by 3.6
    Gate("etcd", "flag", "experimental-initial-corrupt-check", None, "3.6.0", "kubeadm phases/etcd/local.go; renamed in etcd 3.6", "--feature-gates=InitialCorruptCheck=true"),
    Gate("etcd", "feature-gate", "InitialCorruptCheck", "3.6.0", None, _ETCD36, "--experimental-initial-corrupt-check=true"),
    Gate("etcd", "flag", "experimental-watch-progress-notify-interval", None, "3.6.0", "kubeadm phases/etcd/local.go; renamed in etcd 3.6", "--watch-progress-notify-interval"),
    Gate("etcd", "flag", "watch-progress-notify-interval", "3.6.0", None, _ETCD36, "--experimental-watch-progress-notify-interval"),
    Gate("etcd", "flag", "experimental-compact-hash-check-enabled", "3.5.5", "3.6.0", f"{_ETCD35} v3.5.5 (etcd-io/etcd#14039)", "--feature-gates=CompactHashCheck=true (3.6+)"),
    Gate("etcd", "flag", "experimental-compact-hash-check-time", "3.5.5", "3.6.0", f"{_ETCD35} v3.5.5", "--compact-hash-check-time (3.6+)"),
    Gate("etcd", "feature-gate", "CompactHashCheck", "3.6.0", None, _ETCD36, "--experimental-compact-hash-check-enabled=true (3.5.5+)"),
    Gate("etcd", "flag", "compact-hash-check-time", "3.6.0", None, _ETCD36, "--experimental-compact-hash-check-time"),
    Gate("etcd", "flag", "experimental-enable-lease-checkpoint-persist", "3.5.2", "3.6.0", f"{_ETCD35} v3.5.2", "--feature-gates=LeaseCheckpointPersist=true (3.6+)"),
    Gate("etcd", "flag", "experimental-corrupt-check-time", None, "3.6.0", "renamed in etcd 3.6", "--corrupt-check-time"),
    Gate("etcd", "flag", "corrupt-check-time", "3.6.0", None, _ETCD36, "--experimental-corrupt-check-time"),
    Gate("etcd", "flag", "feature-gates", "3.6.0", None, "etcd 3.6 added --feature-gates (KEP-4647 context)", "the --experimental-* flags"),
    Gate("etcd", "flag", "max-concurrent-streams", "3.5.5", None, f"{_ETCD35} v3.5.5 (etcd PR 14219)"),
    Gate("etcd", "flag", "tls-min-version", "3.5.8", None, f"{_ETCD35} v3.5.8 (etcd PR 15483)"),
    Gate("etcd", "flag", "tls-max-version", "3.5.8", None, f"{_ETCD35} v3.5.8 (etcd PR 15483)"),
    Gate("etcd", "flag", "listen-client-http-urls", "3.5.8", None, f"{_ETCD35} v3.5.8 (etcd PR 15589)"),
    Gate("etcd", "flag", "enable-v2", None, "3.6.0", "etcd CHANGELOG-3.5 v3.5.0: --enable-v2 deprecated, removed in 3.6"),
    # kube-apiserver: LIST / watch-cache features
    Gate("kube-apiserver", "feature-gate", "ConsistentListFromCache", "1.28.0", "1.34.0", f"{_KFEAT}: alpha 1.28, beta on 1.31, GA locked on 1.34 (BKE stops setting it at GA)"),
    Gate("kube-apiserver", "feature-gate", "ListFromCacheSnapshot", "1.34.0", None, f"{_KFEAT}: alpha 1.33 (off), beta on 1.34"),
    Gate("kube-apiserver", "flag", "goaway-chance", "1.18.0", None, "kube-apiserver reference: --goaway-chance (added 1.18)"),
)

_INDEX: dict[tuple[str, str, str], tuple[Gate, ...]] = {}
for _g in GATES:
    _INDEX[(_g.component, _g.kind, _g.name)] = _INDEX.get((_g.component, _g.kind, _g.name), ()) + (_g,)


def gate_for(component: str, kind: str, name: str) -> tuple[Gate, ...]:
    return _INDEX.get((family_of(component), kind, name), ())


def gate_open(component: str, kind: str, name: str, versions: VersionSet) -> bool:
    """True when the version of `component` has `name` (no row: always)."""
    rows = gate_for(component, kind, name)
    if not rows:
        return True
    v = versions.of(family_of(component))
    return any(g.covers(v) for g in rows)
