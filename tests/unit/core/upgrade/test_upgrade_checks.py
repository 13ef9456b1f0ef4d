"""upgrade_findings: mandatory, skippable and notice findings from facts, and --ignore-check."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from bke.core.upgrade import CHECKS, Facts, resolve_target, upgrade_findings

from ...upgrade_helpers import SEED, SPLIT, plan_of

NOW = datetime(2026, 12, 1, 8, 0, tzinfo=timezone.utc)
SEED_HOSTS = frozenset({"master1", "master2", "master3", "node1"})


def _live(**kw) -> Facts:
    base = dict(now=NOW, healthy=True, agents_alive=SEED_HOSTS, cert_expiry={"apiserver@master1": NOW + timedelta(days=300)},
                cgroup_v1_hosts=frozenset())
    base.update(kw)
    return Facts(**base)


def _report(facts: Facts, ignore=(), example=SEED, to="v1.33.5", **versions):
    plan = plan_of(example, **versions)
    return upgrade_findings(plan, resolve_target(plan, to), facts, ignore)


def test_a_healthy_live_cluster_has_no_findings() -> None:
    r = _report(_live())
    assert (r.findings, r.refused, r.not_checked, r.left_out) == ((), False, (), ())


def test_offline_facts_are_not_checked_rather_than_guessed() -> None:
    r = _report(Facts())
    assert not r.refused
    assert set(r.not_checked) == {"ClusterHealthy", "AgentsAlive", "CertificatesExpiry"}


# (facts, --ignore-check, finding names, refused, left out)
CASES = [
    (dict(healthy=False, health_reason="etcd-data: 1 of 3 members answer"), (), {"ClusterHealthy"}, True, ()),
    (dict(agents_alive=SEED_HOSTS - {"node1"}), (), {"AgentsAlive"}, True, ()),
    (dict(agents_alive=SEED_HOSTS - {"node1"}), ("AgentsAlive",), {"AgentsAlive"}, False, ("node1",)),
    (dict(agents_alive=SEED_HOSTS - {"master2"}), (), {"AgentsAliveEtcd"}, True, ()),
    (dict(agents_alive=SEED_HOSTS - {"master2"}), ("AgentsAlive",), {"AgentsAliveEtcd"}, True, ()),
    (dict(cert_expiry={"apiserver@master1": NOW + timedelta(hours=2)}), (), {"CertificatesExpiry"}, False, ()),  # renewed
    (dict(cert_expiry={"apiserver@master1": NOW + timedelta(hours=24)}), (), {"CertificatesExpiry"}, False, ()),  # boundary
    (dict(cert_expiry={"apiserver@master1": NOW + timedelta(hours=25)}), (), set(), False, ()),
    (dict(cert_expiry={"apiserver@master1": NOW + timedelta(hours=2)}, renew_certificates=False), (),
     {"CertificatesExpiry"}, True, ()),
    (dict(cert_expiry={"apiserver@master1": NOW + timedelta(hours=2)}, renew_certificates=False), ("CertificatesExpiry",),
     {"CertificatesExpiry"}, False, ()),
    (dict(cert_expiry={"apiserver@master1": NOW + timedelta(hours=2)}, upgrade_duration=timedelta(hours=1)), (), set(), False, ()),
    (dict(), ("AgentsAlive", "CertificatesExpiry"), set(), False, ()),  # ignoring a check that did not fire
    # with renewal on, what the upgrade does not renew refuses like with renewal off: a CA, a
    # kubelet.conf (kubeadm leaves it to the kubelet), a row name that is no instance
    (dict(cert_expiry={"ca": NOW + timedelta(hours=2)}), (), {"CertificatesExpiry"}, True, ()),
    (dict(cert_expiry={"kubelet.conf@node1": NOW + timedelta(hours=2)}), (), {"CertificatesExpiry"}, True, ()),
    (dict(cert_expiry={"kubelet.conf@node1": NOW + timedelta(hours=2)}), ("CertificatesExpiry",),
     {"CertificatesExpiry"}, False, ()),
]


@pytest.mark.parametrize(("facts", "ignore", "names", "refused", "left_out"), CASES)
def test_fact_checks(facts: dict, ignore: tuple, names: set, refused: bool, left_out: tuple) -> None:
    r = _report(_live(**facts), ignore)
    assert {f.name for f in r.findings} == names
    assert r.refused is refused, r.reasons()
    assert r.left_out == left_out


def test_renewed_certificates_are_a_notice_that_says_so() -> None:
    (f,) = _report(_live(cert_expiry={"front-proxy-client@master2": NOW + timedelta(hours=1)})).findings
    assert f.kind == "notice" and "renewed as part of the upgrade" in f.message and "front-proxy-client@master2" in f.message


def _kept_and_renewed(expiring: set[str], to: str, etcd: str) -> tuple[set[str], set[str]]:
    soon = NOW + timedelta(hours=1)
    plan = plan_of(SEED)
    r = upgrade_findings(plan, resolve_target(plan, to, etcd), _live(cert_expiry=dict.fromkeys(expiring, soon)))
    by_kind = {f.kind: f for f in r.findings}
    assert set(by_kind) <= {"notice", "skippable"}
    if "skippable" in by_kind:
        assert "bke certs renew" in by_kind["skippable"].message and r.refused
    kept = set(by_kind["skippable"].nodes) if "skippable" in by_kind else set()
    return kept, expiring - kept


def test_renewed_and_kept_certificates_are_told_apart() -> None:
    names = {"scheduler.conf@master1", "etcd-data-server@master1", "admin.conf@master3", "ca", "super-admin.conf",
             "apiserver-etcd-client@master2", "kubelet.conf@master1"}
    # a Kubernetes-only change: etcd members are not replaced, so their certificates are not renewed
    kept, renewed = _kept_and_renewed(names, "v1.33.5", "v3.5.1")
    assert renewed == {"scheduler.conf@master1", "admin.conf@master3", "apiserver-etcd-client@master2"}
    # an etcd-only change renews only the members' certificates
    kept, renewed = _kept_and_renewed(names, "v1.33.2", "v3.5.2")
    assert renewed == {"etcd-data-server@master1"}


def test_health_reason_is_in_the_refusal() -> None:
    r = _report(_live(healthy=False, health_reason="etcd-data: 1 of 3 members answer"))
    assert r.reasons() == ["[ClusterHealthy] the cluster is not healthy: etcd-data: 1 of 3 members answer"]


def test_skippable_refusal_names_the_flag_that_overrides_it() -> None:
    r = _report(_live(agents_alive=SEED_HOSTS - {"node1"}))
    (reason,) = r.reasons()
    assert "node1" in reason and "--ignore-check AgentsAlive" in reason and "bke retry --nodes" in reason


@pytest.mark.parametrize("name", [n for n, k in CHECKS.items() if k == "mandatory"])
def test_ignoring_a_mandatory_check_is_an_error_naming_it(name: str) -> None:
    r = _report(_live(), (name,))
    assert r.refused
    assert r.errors == (f"--ignore-check {name}: {name} is mandatory and cannot be ignored",)


def test_ignoring_an_unknown_check_lists_the_skippable_ones() -> None:
    r = _report(_live(), ("NoSuchCheck",))
    assert r.refused and r.errors == ("--ignore-check NoSuchCheck: no such check; skippable checks are "
                                      "AgentsAlive, CertificatesExpiry",)


def test_a_path_rule_is_a_mandatory_finding() -> None:
    r = _report(_live(), ("KubernetesOneMinor",), to="v1.35.0")
    assert "KubernetesOneMinor" in {f.name for f in r.findings if f.kind == "mandatory"}
    assert any("mandatory and cannot be ignored" in e for e in r.errors)


def test_split_cluster_dead_agent_on_a_controller_manager_node_is_left_out() -> None:
    hosts = frozenset(n.hostname for n in plan_of(SPLIT).nodes)
    r = _report(_live(agents_alive=hosts - {"m4"}), ("AgentsAlive",), example=SPLIT)
    assert not r.refused and r.left_out == ("m4",)
    r = _report(_live(agents_alive=hosts - {"events2"}), ("AgentsAlive",), example=SPLIT)
    assert r.refused and r.findings[0].name == "AgentsAliveEtcd" and r.findings[0].nodes == ("events2",)


OPT_OUT = ("role: [node]}", 'role: [node], kubelet: {extraArgs: {fail-cgroupv1: "false"}}}')


@pytest.mark.parametrize(("extra", "refused_hosts"), [(None, ("master1", "node1")), (OPT_OUT, ("master1",))])
def test_cgroup_v1_hosts_are_refused_from_1_35_unless_the_spec_opts_out(extra, refused_hosts) -> None:
    plan = plan_of(SEED, "v1.34.1", "v3.6.4", extra=extra)
    facts = _live(cgroup_v1_hosts=frozenset({"master1", "node1"}))
    r = upgrade_findings(plan, resolve_target(plan, "v1.35.0"), facts)
    (f,) = r.findings
    assert (f.name, f.kind, f.nodes) == ("CgroupV2", "mandatory", refused_hosts)
    # the same hosts are fine for a 1.34 patch upgrade
    assert upgrade_findings(plan, resolve_target(plan, "v1.34.3"), facts).findings == ()
