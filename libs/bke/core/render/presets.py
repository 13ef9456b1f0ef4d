"""Large-cluster presets as data: size tiers, and per tier the flag values with their sources.

The plan's size (nodes that register with the API server) picks a tier. For every (component,
flag) the row of the highest tier not above the cluster's tier applies, so a bigger tier overrides
one value and keeps the rest. Rows at tier "small" are the safe subset every cluster gets. A value
is emitted only if its version gate is open (see gates.py), and rows with a condition (goaway
needs two or more API servers behind the endpoint) only when it holds.

Values never replace the user's extraArgs: presets sit between the built-in defaults and the
cluster extraArgs in the merge order.
"""
from __future__ import annotations

from dataclasses import dataclass

from bke.core.flagrules.gates import VersionSet, family_of, gate_open

__all__ = ["PRESETS", "TIERS", "ClusterFacts", "Preset", "Tier", "preset_args", "tier_for"]


@dataclass(frozen=True)
class Tier:
    name: str
    min_nodes: int
    why: str


TIERS: tuple[Tier, ...] = (
    Tier("small", 0, "every cluster: the safe subset"),
    Tier("medium", 100, "from 100 nodes: GCE kube-up already split events etcd above 50 nodes (k/k PR 18819)"),
    Tier("large", 1000, "from 1,000 nodes: the 5,000-node correctness settings"),
    Tier("xlarge", 3000, "from 3,000 nodes: the 5,000-node scale-test settings"),
)
_RANK = {t.name: i for i, t in enumerate(TIERS)}


@dataclass(frozen=True)
class ClusterFacts:
    nodes: int  # nodes that register (etcd-only nodes run a standalone kubelet and do not)
    apiservers: int


@dataclass(frozen=True)
class Preset:
    component: str  # kube-apiserver | kube-controller-manager | kube-scheduler | etcd (all etcd clusters)
    flag: str  # flag name without dashes, or "feature-gates"
    value: str
    tier: str
    source: str
    gate: str = ""  # the feature gate's name when flag == "feature-gates"
    needs: str = ""  # "" or "multi-apiserver"


_GOAWAY = "kube-apiserver reference, --goaway-chance: '.001 (1/1000) is a recommended starting point'; only useful behind a load balancer with 2+ API servers"
_GCE19_CORR = "Kubernetes 1.9 scalability validation on 5,000-node GCE clusters, correctness configuration"
_GCE19_PERF = "Kubernetes 1.9 scalability validation on 5,000-node GCE clusters, performance configuration"
_KOPS5K = "kOps 5,000-node CI: tests/e2e/scenarios/scalability/run-test.sh"
_KUBEADM_ETCD = "kubeadm cmd/kubeadm/app/phases/etcd/local.go defaults"
_ETCD_LIMIT = "etcd docs dev-guide/limit: default quota 2 GiB, 8 GiB suggested maximum"
_KUBESPRAY_ETCD = "Kubespray roles/etcd defaults (etcd_heartbeat_interval 250, etcd_election_timeout 5000)"

# flags that a source sets together, one value each
_INFLIGHT = ("max-requests-inflight", "max-mutating-requests-inflight")  # the API server's two limits
_CLIENT_RATE = ("kube-api-qps", "kube-api-burst")  # a component's client to the API server
_ENDPOINT_BATCH = ("endpoint-updates-batch-period", "endpointslice-updates-batch-period")


def _together(component: str, flags: tuple[str, str], values: tuple[str, str], tier: str, source: str) -> tuple[Preset, ...]:
    return tuple(Preset(component, flag, value, tier, source) for flag, value in zip(flags, values))


PRESETS: tuple[Preset, ...] = (
    # kube-apiserver
    Preset("kube-apiserver", "goaway-chance", "0.001", "small", _GOAWAY, needs="multi-apiserver"),
    Preset("kube-apiserver", "feature-gates", "true", "small", "KEP-2340 consistent reads from cache; beta on from 1.31", gate="ConsistentListFromCache"),
    Preset("kube-apiserver", "feature-gates", "true", "small", "kube_features.go: ListFromCacheSnapshot beta on from 1.34", gate="ListFromCacheSnapshot"),
    *_together("kube-apiserver", _INFLIGHT, ("1500", "500"), "large", _GCE19_CORR),
    *_together("kube-apiserver", _INFLIGHT, ("3000", "1000"), "xlarge", _GCE19_PERF),
    Preset("kube-apiserver", "delete-collection-workers", "16", "large", f"{_KOPS5K} (deleteCollectionWorkers=16); also the 1.9 GCE 5k run"),
    Preset("kube-apiserver", "etcd-compaction-interval", "150s", "xlarge", f"{_KOPS5K} (compactionInterval=150s)"),
    # kube-controller-manager
    *_together("kube-controller-manager", _CLIENT_RATE, ("100", "100"), "large", _GCE19_CORR + " (qps/burst 100/100)"),
    Preset("kube-controller-manager", "kube-api-qps", "500", "xlarge", f"{_KOPS5K} (kubeAPIQPS=500)"),
    Preset("kube-controller-manager", "kube-api-burst", "500", "xlarge", f"{_KOPS5K} (kubeAPIBurst=500)"),
    *_together("kube-controller-manager", _ENDPOINT_BATCH, ("500ms", "500ms"), "xlarge", _KOPS5K),
    # kube-scheduler
    Preset("kube-scheduler", "kube-api-qps", "100", "large", f"{_KOPS5K} (scheduler qps=100)"),
    Preset("kube-scheduler", "kube-api-burst", "100", "large", f"{_KOPS5K} (scheduler burst=100)"),
    # etcd (every etcd cluster; per-cluster extraArgs refine it)
    Preset("etcd", "snapshot-count", "10000", "small", _KUBEADM_ETCD + " (also etcd 3.6's default)"),
    Preset("etcd", "quota-backend-bytes", "2147483648", "small", _ETCD_LIMIT + " (the default, made explicit)"),
    Preset("etcd", "quota-backend-bytes", "4294967296", "medium", _ETCD_LIMIT + "; BKE picks 4 GiB between them"),
    Preset("etcd", "quota-backend-bytes", "8589934592", "large", _ETCD_LIMIT + f"; {_KOPS5K} (ETCD_QUOTA_BACKEND_BYTES)"),
    Preset("etcd", "auto-compaction-retention", "8", "small", "Kubespray roles/etcd defaults (etcd_compaction_retention 8 hours); a backstop to the API server's own 5m compaction"),
    Preset("etcd", "heartbeat-interval", "250", "medium", _KUBESPRAY_ETCD),
    Preset("etcd", "election-timeout", "5000", "medium", _KUBESPRAY_ETCD),
    Preset("etcd", "experimental-initial-corrupt-check", "true", "small", _KUBEADM_ETCD),
    Preset("etcd", "feature-gates", "true", "small", _KUBEADM_ETCD + " (etcd >= 3.6)", gate="InitialCorruptCheck"),
    Preset("etcd", "experimental-watch-progress-notify-interval", "5s", "small", _KUBEADM_ETCD),
    Preset("etcd", "watch-progress-notify-interval", "5s", "small", _KUBEADM_ETCD + " (etcd >= 3.6)"),
    Preset("etcd", "experimental-compact-hash-check-enabled", "true", "small", "etcd CHANGELOG-3.5 v3.5.5; KubeOne's etcd defaults"),
    Preset("etcd", "feature-gates", "true", "small", "etcd 3.6 CompactHashCheck feature gate", gate="CompactHashCheck"),
)


def tier_for(nodes: int) -> Tier:
    return [t for t in TIERS if nodes >= t.min_nodes][-1]


def preset_args(component: str, facts: ClusterFacts, versions: VersionSet) -> dict[str, str]:
    """The preset flags of `component` for this cluster, gated by version; feature gates folded
    into one sorted `feature-gates` value."""
    rank = _RANK[tier_for(facts.nodes).name]
    family = family_of(component)
    chosen: dict[tuple[str, str], Preset] = {}
    for p in PRESETS:
        if p.component != family or _RANK[p.tier] > rank:
            continue
        if p.needs == "multi-apiserver" and facts.apiservers < 2:
            continue
        key = (p.flag, p.gate)
        if key not in chosen or _RANK[p.tier] >= _RANK[chosen[key].tier]:
            chosen[key] = p
    out: dict[str, str] = {}
    gates: dict[str, str] = {}
    for (flag, gate), p in chosen.items():
        if gate:
            if gate_open(component, "feature-gate", gate, versions) and gate_open(component, "flag", "feature-gates", versions):
                gates[gate] = p.value
        elif gate_open(component, "flag", flag, versions):
            out[flag] = p.value
    if gates:
        out["feature-gates"] = ",".join(f"{k}={v}" for k, v in sorted(gates.items()))
    return out
