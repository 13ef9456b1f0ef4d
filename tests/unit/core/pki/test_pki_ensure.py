"""The pure ensure core: idempotence, missing after a role is added, SAN refresh, expiry, CA rules."""
from __future__ import annotations

import multiprocessing
from dataclasses import replace
from datetime import timedelta

import pytest

from tests.unit.core.pki.test_pki_support import NOW, SERIAL, SPLIT, SEED, cluster_config, edited, node_doc, seed_plan, split_issued, split_plan

from bke.core.pki import CaIntegrityError, IssueOptions, cert_info, decide, desired_instances, ensure_pki, renew_before
from bke.core.pki.ensure import validity_of
from bke.core.pki.issuance import _issue_job, _make_keys_ahead
from bke.core.pki.workers import WorkerPool


def _verdicts(result):  # type: ignore[no-untyped-def]
    r = result.report
    return {**{i: "issue" for i in r.issued}, **{x.instance: f"reissue: {x.reason}" for x in r.reissued},
            **{i: "reuse" for i in r.reused}}


def test_second_run_changes_nothing() -> None:
    first = split_issued()
    second = ensure_pki(split_plan(), first.materials, NOW + timedelta(days=100), SERIAL, first.manifest)
    assert second.changed == frozenset() and second.removed == ()
    assert second.report.issued == [] and second.report.reissued == [] and second.report.changed_nodes == []
    assert second.materials == first.materials  # same bytes, key for key
    assert second.manifest.to_json() == first.manifest.to_json()
    assert not second.report.changed


def test_first_run_issues_everything_ca_first() -> None:
    r = split_issued().report
    ids = [i.id for i in desired_instances(split_plan())]
    assert r.issued == ids and r.reused == []
    assert ids[:7] == ["ca", "front-proxy-ca", "etcd-ca", "etcd-data-peer-ca", "etcd-events-peer-ca",
                       "etcd-pods-peer-ca", "sa"]
    assert set(r.changed_nodes) == {n.hostname for n in split_plan().nodes}


def test_added_role_issues_only_what_is_missing() -> None:
    base = ensure_pki(seed_plan(), {}, NOW, SERIAL)

    def add_events(docs):  # type: ignore[no-untyped-def]
        docs += [node_doc(f"ev{i}", f"127.0.10.{20 + i}", ["etcd-event"]) for i in (1, 2, 3)]

    grown = ensure_pki(edited(SEED, add_events), base.materials, NOW + timedelta(days=1), SERIAL, base.manifest)
    v = _verdicts(grown)
    new = {k for k, x in v.items() if x == "issue"}
    assert new == {"etcd-events-peer-ca", *(f"etcd-events-{p}@ev{i}" for p in ("server", "peer", "healthcheck-client")
                                            for i in (1, 2, 3))}
    assert all(x == "reuse" for k, x in v.items() if k not in new)  # etcd-ca (the shared client CA) included
    assert grown.materials["etcd-ca"] is base.materials["etcd-ca"]
    assert cert_info(grown.materials["etcd-events-server@ev2"].cert).aki == cert_info(base.materials["etcd-ca"].cert).ski
    assert sorted(grown.report.changed_nodes) == ["ev1", "ev2", "ev3"]


def test_removed_node_is_reported_and_dropped() -> None:
    base = ensure_pki(seed_plan(), {}, NOW, SERIAL)
    shrunk = ensure_pki(edited(SEED, lambda docs: docs.pop()), base.materials, NOW, SERIAL, base.manifest)
    assert shrunk.removed == ("kubelet.conf@node1",)
    assert "kubelet.conf@node1" not in shrunk.materials and shrunk.report.changed_nodes == ["node1"]


def test_san_refresh_reissues_only_the_apiserver_certs() -> None:
    first = split_issued()

    def more_sans(docs):  # type: ignore[no-untyped-def]
        cluster_config(docs)["apiServer"]["certSANs"] = ["api.big.example.com", "api2.big.example.com"]

    again = ensure_pki(edited(SPLIT, more_sans), first.materials, NOW + timedelta(days=2), SERIAL, first.manifest)
    v = _verdicts(again)
    assert {k: x for k, x in v.items() if x != "reuse"} == {f"apiserver@m{i}": "reissue: SANs changed" for i in (1, 2, 3)}
    assert "api2.big.example.com" in cert_info(again.materials["apiserver@m2"].cert).dns
    assert sorted(again.report.changed_nodes) == ["m1", "m2", "m3"]


def test_expiring_leaves_are_reissued_and_cas_reused() -> None:
    first = split_issued()
    later = NOW + timedelta(days=340)  # 25 days left < 30-day window
    again = ensure_pki(split_plan(), first.materials, later, SERIAL, first.manifest)
    v = _verdicts(again)
    for inst in desired_instances(split_plan()):
        if inst.spec.kind in ("ca", "keypair"):
            assert v[inst.id] == "reuse"
        else:
            assert v[inst.id] == "reissue: expires in 25d"
            assert cert_info(again.materials[inst.id].cert).not_after == later + timedelta(days=365)


def test_key_algorithm_change_reissues_leaves_only() -> None:
    first = split_issued()

    def p384(docs):  # type: ignore[no-untyped-def]
        cluster_config(docs)["certificates"]["keyAlgorithm"] = "ECDSA-P384"

    again = ensure_pki(edited(SPLIT, p384), first.materials, NOW, SERIAL, first.manifest)
    v = _verdicts(again)
    assert v["ca"] == "reuse" and v["apiserver@m1"] == "reissue: key algorithm ECDSA-P256 -> ECDSA-P384"


def test_missing_ca_is_new_and_its_leaves_follow() -> None:
    first = split_issued()
    existing = {k: m for k, m in first.materials.items() if k != "etcd-data-peer-ca"}
    again = ensure_pki(split_plan(), existing, NOW, SERIAL, first.manifest)
    v = _verdicts(again)
    assert v["etcd-data-peer-ca"] == "issue"
    assert {k for k, x in v.items() if x.startswith("reissue")} == {f"etcd-data-peer@etcd{i}" for i in (1, 2, 3)}
    assert all(x == "reissue: CA etcd-data-peer-ca is new" for k, x in v.items() if x.startswith("reissue"))


def test_leaf_signed_by_another_ca_is_reissued() -> None:
    first = split_issued()
    other = ensure_pki(split_plan(), {}, NOW, SERIAL)
    mixed = {**first.materials, "apiserver@m1": other.materials["apiserver@m1"]}
    assert _verdicts(ensure_pki(split_plan(), mixed, NOW, SERIAL))["apiserver@m1"] == "reissue: signed by another CA"


def test_ca_without_key_is_an_error_never_a_silent_new_ca() -> None:
    first = split_issued()
    broken = {**first.materials, "ca": replace(first.materials["ca"], key=None)}
    with pytest.raises(CaIntegrityError, match="ca: .*private key is missing") as err:
        decide(desired_instances(split_plan()), broken, NOW, validity_of(split_plan(), NOW))
    assert b"PRIVATE" not in str(err.value).encode()


def test_leaf_without_key_is_reissued() -> None:
    first = split_issued()
    broken = {**first.materials, "kubelet.conf@worker3": replace(first.materials["kubelet.conf@worker3"], key=None)}
    verdicts, _ = decide(desired_instances(split_plan()), broken, NOW, validity_of(split_plan(), NOW))
    assert [v.reason for v in verdicts if v.action != "reuse"] == ["private key missing"]


def test_expiring_ca_is_a_warning() -> None:
    first = split_issued()
    _, warnings = decide(desired_instances(split_plan()), first.materials, NOW + timedelta(days=3400),
                         validity_of(split_plan(), NOW))
    assert any(w.startswith("CA ca expires in") for w in warnings)


def test_renew_window() -> None:
    assert renew_before(365) == timedelta(days=30)
    assert renew_before(3) == timedelta(days=1)


@pytest.mark.parametrize("in_caller", [True, False])
def test_worker_pool_path_gives_the_same_result(in_caller: bool) -> None:
    """Through worker processes (and this one, with in_caller), as for a big cluster."""
    ctx = multiprocessing.get_context("fork")
    with WorkerPool(2, ctx, _issue_job, _make_keys_ahead, ("ECDSA-P256", 10)) as pool:
        pooled = ensure_pki(split_plan(), {}, NOW, IssueOptions(procs=3, pool=pool, in_caller=in_caller))
    assert set(pooled.materials) == set(split_issued().materials)
    assert pooled.report == split_issued().report
    again = ensure_pki(split_plan(), pooled.materials, NOW, SERIAL, pooled.manifest)
    assert again.changed == frozenset()


def test_report_round_trips_and_carries_no_key_bytes() -> None:
    from bke.core.pki import CertsReport

    report = split_issued().report
    text = report.model_dump_json(by_alias=True)
    assert "PRIVATE KEY" not in text and "BEGIN" not in text and "LS0tLS1CRUdJTi" not in text
    assert CertsReport.model_validate_json(text) == report
    assert [(f.path, f.part) for f in report.nodes["worker1"]] == [
        ("/etc/kubernetes/kubelet.conf", "kubeconfig"), ("/etc/kubernetes/pki/ca.crt", "cert")]
    assert "changedNodes" in text  # camelCase on the wire, like the contracts
