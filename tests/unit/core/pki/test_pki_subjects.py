"""Certificate subjects per Kubernetes release (bke.core.pki.subjects): what kubeadm of each release
issues, followed by the ensure step, the upgrade's renewal, the bootstrap RBAC and the diff."""
from __future__ import annotations

import pytest

from bke.core.lifecycle.diff import diff_plans
from bke.core.pki import ensure_pki
from bke.core.pki.expiry import renewal_instances
from bke.core.pki.instances import desired_instances
from bke.core.pki.material import cert_info
from bke.core.pki.store import Snapshot
from bke.core.pki.subjects import RULES, dropped
from bke.core.pki.table import CERTS, by_name
from bke.core.rbac import bindings_for
from bke.core.upgrade.certificates import rbac_before_renewal
from bke.core.versions import KUBERNETES

from tests.unit.core.pki.test_pki_support import NOW, SEED, SERIAL, plan_of

GROUP = ("kubeadm:cluster-admins",)
KUBELET_CLIENT_BINDING = "kubeadm:apiserver-kubelet-client"

# What kubeadm of each release puts in apiserver-kubelet-client's O (certlist.go
# KubeadmCertKubeletClient): the group from 1.29 (PR 121837), none from PR 138957 on - v1.37.0
# and the cherry-picked v1.36.1 and v1.35.5. 1.33 and 1.34 keep it here (see bke.core.pki.subjects).
KUBEADM = [
    ("1.31.0", GROUP), ("1.31.9", GROUP), ("1.32.0", GROUP), ("1.32.9", GROUP), ("1.33.0", GROUP),
    ("1.33.9", GROUP), ("1.34.0", GROUP), ("1.34.9", GROUP), ("1.35.0", GROUP), ("1.35.4", GROUP),
    ("1.35.5", ()), ("1.35.9", ()), ("1.36.0", GROUP), ("1.36.1", ()), ("1.36.9", ()), ("1.37.0", ()),
    ("1.37.9", ()), ("1.38.0", ()),
]


def _seed_at(version: str):
    return plan_of(SEED.read_text().replace("v1.33.2", f"v{version}"))  # kube-proxy's entry too


@pytest.mark.parametrize("version,o", KUBEADM)
def test_kubelet_client_subject_is_kubeadms_of_that_release(version: str, o: tuple[str, ...]) -> None:
    assert by_name("apiserver-kubelet-client").o_for(version) == o
    assert dropped("kubeadm-138957", version) == (o == ())


@pytest.mark.parametrize("minor", sorted(KUBERNETES))
def test_every_supported_minor_plans_kubeadms_subjects(minor: str) -> None:
    """Each supported minor, first and a late patch, through the plan: only the kubelet client
    changes, and only where kubeadm changed it; every other row keeps the table's subject."""
    for version in (f"{minor}.0", f"{minor}.9"):
        insts = desired_instances(_seed_at(version))
        want = dict(KUBEADM)[version]
        for inst in insts:
            if inst.spec.name == "apiserver-kubelet-client":
                assert inst.o == want, (version, inst.id)
            else:
                assert inst.o == inst.spec.o, (version, inst.id)
        assert sum(i.spec.name == "apiserver-kubelet-client" for i in insts) == 3  # one per apiserver


def test_only_the_kubelet_client_row_has_a_rule_and_rules_name_real_groups() -> None:
    ruled = [r.name for r in CERTS if r.o_rule]
    assert ruled == ["apiserver-kubelet-client"]
    for r in CERTS:
        if r.o_rule:
            assert set(RULES[r.o_rule].drops) <= set(r.o)


@pytest.mark.parametrize("version", [v for v, _ in KUBEADM if v.rsplit(".", 1)[0] in KUBERNETES])
def test_rbac_binds_the_certificate_by_name_exactly_where_it_lost_its_group(version: str) -> None:
    """The rights follow the subject: without the group, the user binding must exist (else
    `kubectl logs/exec` are Forbidden, kubeadm#3310); with the group it is not created (kubeadm's
    releases before the change do not create it)."""
    names = {b.name for b in bindings_for(version)}
    has_group = bool(by_name("apiserver-kubelet-client").o_for(version))
    assert (KUBELET_CLIENT_BINDING in names) == (not has_group)
    assert "kubeadm:cluster-admins" in names  # admin.conf's group, every release


def test_ensure_reissues_only_the_kubelet_client_when_the_release_drops_its_group() -> None:
    before = ensure_pki(_seed_at("1.36.0"), {}, NOW, SERIAL)
    assert cert_info(before.materials["apiserver-kubelet-client@master1"].cert).o == GROUP
    after = ensure_pki(_seed_at("1.36.1"), before.materials, NOW, SERIAL, before.manifest)
    reissued = {r.instance: r.reason for r in after.report.reissued}
    assert reissued == {f"apiserver-kubelet-client@master{i}": "subject changed" for i in (1, 2, 3)}
    assert not after.report.issued
    info = cert_info(after.materials["apiserver-kubelet-client@master1"].cert)
    assert info.o == () and info.cn == "kube-apiserver-kubelet-client"
    assert sorted(after.report.changed_nodes) == ["master1", "master2", "master3"]  # the node gets it
    # idempotent at the new release
    again = ensure_pki(_seed_at("1.36.1"), after.materials, NOW, SERIAL, after.manifest)
    assert not again.report.reissued and not again.changed


def test_renewal_keeps_stored_subjects_unless_an_upgrade_names_its_release() -> None:
    issued = ensure_pki(_seed_at("1.36.0"), {}, NOW, SERIAL)
    snap = Snapshot(issued.manifest, issued.materials)
    ids = ["apiserver-kubelet-client@master1", "admin.conf@master1", "apiserver@master1"]
    kept = {i.id: i.o for i in renewal_instances(snap, ids)}  # `bke certs renew`: kubeadm certs renew
    assert kept["apiserver-kubelet-client@master1"] == GROUP
    same = {i.id: i.o for i in renewal_instances(snap, ids, "1.36.0")}
    assert same == kept
    up = {i.id: i.o for i in renewal_instances(snap, ids, "v1.37.0")}  # an upgrade into 1.37
    assert up == {**kept, "apiserver-kubelet-client@master1": ()}
    assert up["admin.conf@master1"] == GROUP  # admin.conf keeps its group in every release


def test_a_version_change_alone_stays_the_upgraders_even_when_a_subject_follows_it() -> None:
    d = diff_plans(_seed_at("1.36.0"), _seed_at("1.37.0"))
    assert d.versions == {"kubernetes": ("v1.36.0", "v1.37.0")}
    assert d.upgrade_only and not d.certificates and not d.refused


@pytest.mark.parametrize("current,target,first", [
    ("v1.36.0", "v1.37.0", True), ("v1.35.4", "v1.35.5", True), ("v1.34.9", "v1.35.5", True),
    ("v1.35.5", "v1.36.0", True),  # 1.36.0 issues the group again: its RBAC (group binding) first too
    ("v1.36.1", "v1.37.0", False), ("v1.33.2", "v1.34.9", False), ("v1.35.0", "v1.35.4", False),
])
def test_the_upgrade_applies_the_targets_rbac_before_a_subject_changes(current: str, target: str, first: bool) -> None:
    assert rbac_before_renewal(current, target) is first
