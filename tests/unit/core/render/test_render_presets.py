"""Large-cluster presets: tiers by registered node count, values per tier, conditions, sources."""
from __future__ import annotations

import pytest

from bke.core.render import PRESETS, TIERS, ClusterFacts, preset_args, tier_for
from bke.core.render.gates import VersionSet
from bke.core.versions import parse_version

from tests.unit.core.render.test_render_support import flags, plan_of, pod, render, spec_text

V133 = VersionSet(parse_version("1.33.2"), parse_version("3.5.21"), parse_version("2.1.1"))


@pytest.mark.parametrize(("nodes", "tier"), [(0, "small"), (99, "small"), (100, "medium"), (999, "medium"),
                                             (1000, "large"), (2999, "large"), (3000, "xlarge"), (5000, "xlarge")])
def test_tier_thresholds(nodes: int, tier: str) -> None:
    assert tier_for(nodes).name == tier


def test_every_preset_names_a_known_tier_and_an_upstream_source() -> None:
    names = {t.name for t in TIERS}
    for p in PRESETS:
        assert p.tier in names and len(p.source) > 20, p
        assert (p.flag == "feature-gates") == bool(p.gate)


def test_small_cluster_gets_the_safe_subset_only() -> None:
    api = preset_args("kube-apiserver", ClusterFacts(nodes=10, apiservers=3), V133)
    assert api == {"goaway-chance": "0.001", "feature-gates": "ConsistentListFromCache=true"}
    assert preset_args("kube-controller-manager", ClusterFacts(10, 3), V133) == {}
    etcd = preset_args("etcd-events", ClusterFacts(10, 3), V133)
    assert etcd["quota-backend-bytes"] == "2147483648" and "heartbeat-interval" not in etcd


def test_goaway_needs_two_apiservers() -> None:
    assert "goaway-chance" not in preset_args("kube-apiserver", ClusterFacts(nodes=5000, apiservers=1), V133)
    assert preset_args("kube-apiserver", ClusterFacts(nodes=5, apiservers=2), V133)["goaway-chance"] == "0.001"


@pytest.mark.parametrize(("nodes", "inflight", "mutating", "kcm_qps", "quota", "heartbeat"), [
    (50, None, None, None, "2147483648", None),
    (500, None, None, None, "4294967296", "250"),
    (1500, "1500", "500", "100", "8589934592", "250"),
    (4000, "3000", "1000", "500", "8589934592", "250"),
])
def test_values_per_tier(nodes: int, inflight: str | None, mutating: str | None, kcm_qps: str | None, quota: str,
                         heartbeat: str | None) -> None:
    facts = ClusterFacts(nodes=nodes, apiservers=3)
    api = preset_args("kube-apiserver", facts, V133)
    kcm = preset_args("kube-controller-manager", facts, V133)
    etcd = preset_args("etcd-data", facts, V133)
    assert api.get("max-requests-inflight") == inflight and api.get("max-mutating-requests-inflight") == mutating
    assert kcm.get("kube-api-qps") == kcm_qps and kcm.get("kube-api-burst") == kcm_qps
    assert etcd["quota-backend-bytes"] == quota and etcd.get("heartbeat-interval") == heartbeat
    if nodes >= 3000:  # xlarge keeps large's values it does not override
        assert api["delete-collection-workers"] == "16" and kcm["endpointslice-updates-batch-period"] == "500ms"


# 1,100 workers need more than the default /16's 256 node CIDRs: a /12 holds 4,096.
BIG_PODS = {"networking": {"podSubnet": "10.128.0.0/12"}}


def _cluster(workers: int) -> list[tuple[str, str, list[str]]]:
    nodes = [("m1", "10.1.0.1", ["master", "etcd"]), ("m2", "10.1.0.2", ["master"]), ("m3", "10.1.0.3", ["master"])]
    return nodes + [(f"w{i}", f"10.1.{1 + i // 250}.{1 + i % 250}", ["node"]) for i in range(workers)]


def test_rendered_manifests_follow_the_plan_size() -> None:
    small = render(plan_of(spec_text(_cluster(10))))
    large = render(plan_of(spec_text(_cluster(1100), cluster=BIG_PODS)))
    assert small.tier == "small" and large.tier == "large"
    s, big = flags(pod(small, "m1", "kube-apiserver.yaml")), flags(pod(large, "m1", "kube-apiserver.yaml"))
    assert "max-requests-inflight" not in s and big["max-requests-inflight"] == "1500"
    assert flags(pod(large, "m1", "kube-scheduler.yaml"))["kube-api-qps"] == "100"
    assert flags(pod(large, "m1", "etcd.yaml"))["quota-backend-bytes"] == "8589934592"


def test_extra_args_override_a_preset_value() -> None:
    text = spec_text(_cluster(1100), cluster={**BIG_PODS, "apiServer": {"extraArgs": {"max-requests-inflight": "2222"}}})
    f = flags(pod(render(plan_of(text)), "m2", "kube-apiserver.yaml"))
    assert f["max-requests-inflight"] == "2222" and f["max-mutating-requests-inflight"] == "500"
