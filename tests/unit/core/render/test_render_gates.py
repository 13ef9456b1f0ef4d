"""Version gating of flags, feature gates and probe endpoints, down to the patch release; and the
clear error for versions outside the table."""
from __future__ import annotations

import pytest

from bke.core.render import GATES, DeniedFlagError, UnsupportedVersionError, gate_open
from bke.core.plan import plan_spec_text
from bke.core.render.gates import VersionSet
from bke.core.versions import parse_version

from tests.unit.core.render.test_render_support import flags, plan_of, plan_unchecked, pod, render, spec_text

NODES = [("m1", "10.2.0.1", ["master", "etcd"]), ("w1", "10.2.0.2", ["node"])]


def _etcd(etcd: str, kubernetes: str = "v1.33.2", **kw) -> dict:
    rendered = render(plan_of(spec_text(NODES, etcd=etcd, kubernetes=kubernetes, endpoint=None, **kw)))
    return pod(rendered, "m1", "etcd.yaml")


def _probe_paths(manifest: dict) -> dict[str, str | None]:
    c = manifest["spec"]["containers"][0]
    return {k: (c.get(k) or {}).get("httpGet", {}).get("path") for k in ("livenessProbe", "readinessProbe", "startupProbe")}


def test_etcd_3_5_1_predates_livez_readyz_and_the_compact_hash_check() -> None:
    m = _etcd("v3.5.1")
    assert _probe_paths(m) == {"livenessProbe": "/health?exclude=NOSPACE&serializable=true", "readinessProbe": None,
                               "startupProbe": "/health?serializable=false"}
    f = flags(m)
    assert f["experimental-initial-corrupt-check"] == "true" and f["experimental-watch-progress-notify-interval"] == "5s"
    assert "experimental-compact-hash-check-enabled" not in f and "feature-gates" not in f


def test_etcd_3_5_5_gains_the_compact_hash_check_and_3_5_11_the_new_probes() -> None:
    assert flags(_etcd("v3.5.5"))["experimental-compact-hash-check-enabled"] == "true"
    assert _probe_paths(_etcd("v3.5.10"))["livenessProbe"].startswith("/health")
    assert _probe_paths(_etcd("v3.5.11")) == {"livenessProbe": "/livez", "readinessProbe": "/readyz", "startupProbe": "/readyz"}


def test_etcd_3_6_uses_the_renamed_flags_and_feature_gates() -> None:
    m = _etcd("v3.6.5", kubernetes="v1.35.1")
    f = flags(m)
    assert f["feature-gates"] == "CompactHashCheck=true,InitialCorruptCheck=true"
    assert f["watch-progress-notify-interval"] == "5s"
    assert not [k for k in f if k.startswith("experimental-")]
    assert _probe_paths(m)["readinessProbe"] == "/readyz"


def test_apiserver_list_features_follow_the_kubernetes_version() -> None:
    for k8s, gates in (("v1.31.0", "ConsistentListFromCache=true"), ("v1.33.9", "ConsistentListFromCache=true"),
                       ("v1.34.0", "ListFromCacheSnapshot=true"), ("v1.37.1", "ListFromCacheSnapshot=true")):
        etcd = "v3.5.21" if k8s < "v1.34" else "v3.6.5"
        rendered = render(plan_of(spec_text(NODES, kubernetes=k8s, etcd=etcd, endpoint=None)))
        assert flags(pod(rendered, "m1", "kube-apiserver.yaml"))["feature-gates"] == gates, k8s


def test_gate_bounds_are_inclusive_exclusive_to_the_patch() -> None:
    def vs(etcd: str) -> VersionSet:
        return VersionSet(parse_version("1.33.0"), parse_version(etcd), parse_version("2.0.0"))

    assert not gate_open("etcd-events", "flag", "experimental-compact-hash-check-enabled", vs("3.5.4"))
    assert gate_open("etcd-events", "flag", "experimental-compact-hash-check-enabled", vs("3.5.5"))
    assert not gate_open("etcd-events", "flag", "experimental-compact-hash-check-enabled", vs("3.6.0"))
    assert gate_open("etcd", "flag", "some-flag-without-a-row", vs("3.5.0"))


def test_every_gate_has_a_source_and_a_sane_range() -> None:
    for g in GATES:
        assert g.source and g.kind in ("flag", "feature-gate", "endpoint")
        if g.since and g.until:
            assert parse_version(g.since) < parse_version(g.until), g


def test_user_flag_outside_its_gate_is_refused_with_what_to_use_instead() -> None:
    text = spec_text(NODES, endpoint=None, etcd="v3.6.5", kubernetes="v1.35.0",
                     cluster={"etcd": {"extraArgs": {"experimental-initial-corrupt-check": "true"}}})
    with pytest.raises(DeniedFlagError) as exc:
        render(plan_unchecked(text))
    path, message = exc.value.errors[0]
    assert path == "cluster.spec.clusterConfig.cluster.etcd.extraArgs.experimental-initial-corrupt-check"
    assert "3.6.5" in message and "InitialCorruptCheck" in message
    # the planner refuses it first, with the same path and message
    planned = plan_spec_text(text, "test")
    assert not planned.ok and [(e.path, e.message) for e in planned.errors] == [(path, message)]


def test_user_feature_gate_outside_its_gate_is_refused() -> None:
    text = spec_text(NODES, endpoint=None, cluster={"apiServer": {"extraArgs": {"feature-gates": "ListFromCacheSnapshot=true"}}})
    with pytest.raises(DeniedFlagError, match="ListFromCacheSnapshot"):
        render(plan_unchecked(text))
    planned = plan_spec_text(text, "test")
    assert [e.path for e in planned.errors] == ["cluster.spec.clusterConfig.cluster.apiServer.extraArgs.feature-gates"]


def test_unsupported_version_lists_the_table() -> None:
    plan = plan_of(spec_text(NODES, endpoint=None)).model_copy(update={"kubernetes_version": "v1.30.4", "etcd_version": "v3.4.1"})
    with pytest.raises(UnsupportedVersionError) as exc:
        render(plan)
    messages = dict(exc.value.errors)
    assert "1.31, 1.32, 1.33, 1.34, 1.35, 1.36, 1.37" in messages["cluster.spec.clusterConfig.cluster.kubernetesVersion"]
    assert "3.5, 3.6" in messages["cluster.spec.clusterConfig.cluster.etcdVersion"]


def test_any_patch_of_a_supported_minor_renders() -> None:
    for k8s in ("v1.31.0", "v1.31.99", "v1.37.0"):
        etcd = "v3.5.1" if k8s < "v1.34" else "v3.6.0"
        containerd = "v1.7.0" if k8s < "v1.36" else "v2.0.0"  # 1.35 is the last minor on containerd 1.x
        assert render(plan_of(spec_text(NODES, kubernetes=k8s, etcd=etcd, containerd=containerd, endpoint=None))).file_count > 0
