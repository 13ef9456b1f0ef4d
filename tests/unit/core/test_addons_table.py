"""The addon table (bke.core.spec.addons): on by default, switches, user copies, order, plan rules;
and what the renderer makes of it (kube-proxy's mode, turned-off built-ins)."""
from __future__ import annotations

import pytest
import yaml

from bke.core.plan import plan_spec_text
from bke.core.spec.addons import addon_steps
from bke.core.spec.synth import synth_docs

from ..spec_helpers import to_text
from tests.unit.core.render.test_render_support import plan_of, render


def _docs(k8s: str = "v1.33.2", addons: list | None = None, **cluster) -> list[dict]:
    docs = synth_docs(4, kubernetes=k8s)
    docs[0]["spec"]["clusterConfig"]["cluster"].update(cluster)
    if addons is not None:
        docs[0]["spec"]["clusterConfig"]["addons"] = addons
    return docs


def _outcome(**kw):
    return plan_spec_text(to_text(_docs(**kw)))


def _steps(**kw):
    out = _outcome(**kw)
    assert not out.errors, out.errors
    return addon_steps(out.plan.spec)


def test_everything_built_in_is_on_by_default_in_the_table_order() -> None:
    steps = _steps()
    assert [(s.name, s.source, s.credential) for s in steps] == [
        ("rbac", "rendered", "super-admin"), ("kube-proxy", "rendered", "admin"),
        ("calico", "fetched", "admin"), ("coredns", "rendered", "admin")]
    assert [s.version for s in steps] == ["1.33.2", "1.33.2", "3.31.3", "1.12.0"]
    assert steps[2].wait_for == ("DaemonSet", "kube-system", "calico-node")


def test_switches_turn_built_ins_off() -> None:
    steps = _steps(kubeProxy={"enabled": False}, coreDNS={"enabled": False}, cni="none")
    assert [s.name for s in steps] == ["rbac"]  # RBAC cannot be turned off


def test_user_addons_follow_and_a_listed_built_in_keeps_its_slot() -> None:
    steps = _steps(addons=[{"name": "metrics", "version": "1", "path": "/srv/metrics"},
                           {"name": "coredns", "version": "v1.12.1"},
                           {"name": "calico", "version": "3.31.0", "path": "/srv/my-calico"}])
    assert [(s.name, s.version, s.source, s.path) for s in steps] == [
        ("rbac", "1.33.2", "rendered", None), ("kube-proxy", "1.33.2", "rendered", None),
        ("calico", "3.31.0", "path", "/srv/my-calico"), ("coredns", "v1.12.1", "rendered", None),
        ("metrics", "1", "path", "/srv/metrics")]


def test_cni_none_lets_the_user_bring_a_cni_under_any_name() -> None:
    steps = _steps(cni="none", addons=[{"name": "calico", "version": "3.30.0", "path": "/srv/calico"}])
    assert [(s.name, s.source) for s in steps] == [("rbac", "rendered"), ("kube-proxy", "rendered"),
                                                   ("coredns", "rendered"), ("calico", "path")]


def test_plan_refuses_bad_addon_lists_naming_the_field() -> None:
    out = _outcome(cni="none", kubeProxy={"enabled": False},
                   addons=[{"name": "rbac", "version": "1", "path": "/x"}, {"name": "calico", "version": "3.31.3"},
                           {"name": "kube-proxy", "version": "v1.33.2"}, {"name": "extra", "version": "1"},
                           {"name": "extra", "version": "1", "path": "/y"}])
    got = {e.path: e.message for e in out.errors}
    a = "cluster.spec.clusterConfig.addons"
    assert "cannot be replaced" in got[f"{a}[0].name"]
    assert "turned off by cluster.spec.clusterConfig.cluster.cni" in got[f"{a}[1]"]
    assert "turned off by cluster.spec.clusterConfig.cluster.kubeProxy.enabled" in got[f"{a}[2]"]
    assert "give the folder of its manifests" in got[f"{a}[3].path"]
    assert "listed twice" in got[f"{a}[4].name"]


@pytest.mark.parametrize("name", ["Metrics", "metrics_server", "-metrics", "a" * 64, "metrics.io"])
def test_an_addon_name_that_cannot_name_its_applyset_parent_is_refused(name: str) -> None:
    out = _outcome(addons=[{"name": "ok-name-2", "version": "1", "path": "/x"}, {"name": name, "version": "1", "path": "/y"}])
    got = {e.path: e.message for e in out.errors}
    assert list(got) == ["cluster.spec.clusterConfig.addons[1].name"], got
    assert "not a DNS-1123 label" in got["cluster.spec.clusterConfig.addons[1].name"]


@pytest.mark.parametrize("pods", ["fd00:10::/56", "10.244.0.0/16,fd00:10::/56", "fd00:10::/56,10.244.0.0/16"])
def test_calico_takes_an_ipv6_or_dual_stack_pod_subnet(pods: str) -> None:
    # no longer refused: bke.core.calico wires one pool per family (test_calico_wiring)
    assert not _outcome(networking={"podSubnet": pods, "serviceSubnet": "10.96.0.0/12"}).errors
    assert not _outcome(cni="none", networking={"podSubnet": pods, "serviceSubnet": "10.96.0.0/12"}).errors


@pytest.mark.parametrize("pods,words", [
    ("10.244.0.0/16,10.245.0.0/16", "one IPv4 and one IPv6 CIDR, not two IPv4"),
    ("10.244.0.0/16,fd00::/56,fd01::/56", "at most two CIDRs"),
    ("10.244.0.0/16,nonsense", "malformed CIDR 'nonsense'"),
    ("10.244.0.0/16,10.96.0.0/24", "not two IPv4"),
])
def test_a_pod_subnet_pair_that_is_not_one_per_family_is_refused_naming_the_field(pods: str, words: str) -> None:
    out = _outcome(networking={"podSubnet": pods, "serviceSubnet": "10.96.0.0/12"})
    assert [e.path for e in out.errors] == ["cluster.spec.clusterConfig.cluster.networking.podSubnet"], out.errors
    assert words in out.errors[0].message


def test_each_family_of_a_pair_is_checked_against_the_service_subnet() -> None:
    out = _outcome(networking={"podSubnet": "10.244.0.0/16,fd00:10::/56", "serviceSubnet": "fd00:10:0:1::/112"})
    assert any("pod subnet fd00:10::/56 overlaps service subnet fd00:10:0:1::/112" in e.message for e in out.errors)


def test_ipvs_warns_from_1_35_only() -> None:
    assert not any("ipvs" in w for w in _outcome(k8s="v1.34.1", kubeProxy={"mode": "ipvs"}).warnings)
    warned = [w for w in _outcome(k8s="v1.35.0", kubeProxy={"mode": "ipvs"}).warnings if "ipvs" in w]
    assert warned and "KEP-5495" in warned[0] and "kubeProxy.mode" in warned[0]


def test_nftables_with_an_older_calico_warns() -> None:
    assert any("nftables" in w and "calico 3.29" in w for w in _outcome(k8s="v1.31.4", kubeProxy={"mode": "nftables"}).warnings)
    assert not any("nftables" in w for w in _outcome(k8s="v1.33.2", kubeProxy={"mode": "nftables"}).warnings)


def _addon_doc(rendered, name: str) -> list[dict]:
    f = next((f for f in rendered.addons if f.path == f"{name}.yaml"), None)
    return [] if f is None else [d for d in yaml.safe_load_all(f.content) if d]


def test_kube_proxy_mode_is_rendered_into_its_config() -> None:
    for mode in ("iptables", "nftables", "ipvs"):
        rendered = render(plan_of(to_text(_docs(kubeProxy={"mode": mode}))))
        cm = next(d for d in _addon_doc(rendered, "kube-proxy") if d["kind"] == "ConfigMap")
        assert yaml.safe_load(cm["data"]["config.conf"])["mode"] == mode


def test_renderer_renders_rbac_first_and_skips_what_is_off_or_the_users() -> None:
    rendered = render(plan_of(to_text(_docs())))
    assert [f.path for f in rendered.addons] == ["rbac.yaml", "kube-proxy.yaml", "coredns.yaml"]
    rendered = render(plan_of(to_text(_docs(kubeProxy={"enabled": False}, coreDNS={"enabled": False},
                                            addons=[{"name": "x", "version": "1", "path": "/x"}]))))
    assert [f.path for f in rendered.addons] == ["rbac.yaml"]
    rendered = render(plan_of(to_text(_docs(addons=[{"name": "kube-proxy", "version": "v1", "path": "/mine"}]))))
    assert [f.path for f in rendered.addons] == ["rbac.yaml", "coredns.yaml"]


def test_an_upgrade_moves_the_built_ins_that_follow_the_release_and_keeps_pins() -> None:
    """kube-proxy at the Kubernetes version and CoreDNS/calico at the table's row move with an
    upgrade; a pinned other version and the user's own folder stay as written."""
    from bke.core.spec.addons import addons_at
    from bke.core.spec.models import Addon

    cur = _outcome(k8s="v1.34.3").plan.spec.config
    target = cur.model_copy(update={"kubernetes_version": "v1.35.4"})
    listed = [Addon(name="kube-proxy", version="v1.34.3"), Addon(name="coredns", version="1.12.1"),
              Addon(name="calico", version="3.30.0"), Addon(name="metrics", version="1.34.3", path="/srv/m"),
              Addon(name="calico", version="3.31.3", path="/srv/c")]
    got = [(a.name, a.version) for a in addons_at(cur, target, listed)]
    assert got == [("kube-proxy", "v1.35.4"), ("coredns", "1.13.1"), ("calico", "3.30.0"), ("metrics", "1.34.3"),
                   ("calico", "3.31.3")]


@pytest.mark.parametrize(("version", "words"), [("v1.33.3", "newer than the apiserver's 1.33.2"),
                                                ("v1.29.0", "4 minor versions behind")])
def test_kube_proxy_outside_the_skew_policy_is_refused_naming_the_field(version: str, words: str) -> None:
    out = _outcome(addons=[{"name": "kube-proxy", "version": version}])
    got = {e.path: e.message for e in out.errors}
    assert words in got["cluster.spec.clusterConfig.addons[0].version"], got


def test_kube_proxy_up_to_three_minors_behind_is_accepted() -> None:
    assert not _outcome(addons=[{"name": "kube-proxy", "version": "v1.30.14"}]).errors
