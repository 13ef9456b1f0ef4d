"""The certificate table itself: CA-first order, links, placements, public surface."""
from __future__ import annotations

import bke.core.pki
import bke.core.secrets
from bke.core.paths import ETCD_CERT_DIRS
from bke.core.pki import CERTS, by_name
from bke.core.plan import COMPONENTS

WHERE_WORDS = {"all", "master", "registers", "owner", *COMPONENTS}


def test_names_are_unique_and_ca_rows_come_first() -> None:
    names = [r.name for r in CERTS]
    assert len(names) == len(set(names))
    seen: set[str] = set()
    for row in CERTS:
        if row.ca is not None:
            assert row.ca in seen, f"{row.name} is listed before its CA {row.ca}"
            ca = by_name(row.ca)
            assert ca is not None and ca.is_ca
        seen.add(row.name)
    first_leaf = next(i for i, r in enumerate(CERTS) if r.kind in ("leaf", "kubeconfig"))
    assert all(r.kind in ("leaf", "kubeconfig") for r in CERTS[first_leaf:])


def test_every_leaf_has_a_ca_and_every_ca_signs_itself() -> None:
    for row in CERTS:
        if row.kind in ("leaf", "kubeconfig"):
            assert row.ca and row.cn, row.name
        else:
            assert row.ca is None and row.per == "cluster", row.name


def test_placements_use_known_words_and_owner_only_for_per_node_rows() -> None:
    for row in CERTS:
        for place in (*row.cert, *row.key):
            assert place.where in WHERE_WORDS, (row.name, place.where)
            assert (place.where == "owner") == (row.per == "node"), (row.name, place)
            assert place.path.startswith("/etc/kubernetes/"), place.path
        if row.per == "node":
            assert row.needs in WHERE_WORDS - {"owner"}, row.name


def test_ca_keys_go_only_where_the_issue_says() -> None:
    assert [p.where for p in by_name("ca").key] == ["kube-controller-manager"]
    assert {p.where for p in by_name("sa").key} == {"kube-apiserver", "kube-controller-manager"}
    assert [p.where for p in by_name("sa").cert] == ["kube-apiserver"]
    for name in ("front-proxy-ca", "etcd-ca", "etcd-data-peer-ca", "etcd-events-peer-ca", "etcd-pods-peer-ca"):
        assert by_name(name).key == (), f"{name} key must be on no node"


def test_one_peer_ca_per_etcd_cluster_and_a_shared_client_ca() -> None:
    for cluster, folder in ETCD_CERT_DIRS.items():
        assert by_name(f"{cluster}-peer").ca == f"{cluster}-peer-ca"
        assert by_name(f"{cluster}-server").ca == "etcd-ca"
        assert by_name(f"{cluster}-healthcheck-client").ca == "etcd-ca"
        assert f"{folder}/ca.crt" in {p.path for p in by_name("etcd-ca").cert}
        assert by_name(f"{cluster}-peer-ca").cert[0].path == f"{folder}/peer-ca.crt"
    assert by_name("apiserver-etcd-client").ca == "etcd-ca"
    assert by_name("apiserver-etcd-client").cert[0].path == "/etc/kubernetes/pki/apiserver-etcd-client.crt"


def test_kubeconfig_rows_follow_kubeadm_identities_and_server_rules() -> None:
    expect = {
        "admin.conf": ("kubernetes-admin", ("kubeadm:cluster-admins",), "endpoint", "master"),
        "super-admin.conf": ("kubernetes-super-admin", ("system:masters",), "endpoint", "all"),
        "controller-manager.conf": ("system:kube-controller-manager", (), "local", "kube-controller-manager"),
        "scheduler.conf": ("system:kube-scheduler", (), "local", "kube-scheduler"),
        "kubelet.conf": ("system:node:{hostname}", ("system:nodes",), "endpoint", "registers"),
    }
    for name, (cn, o, server, needs) in expect.items():
        row = by_name(name)
        assert (row.kind, row.cn, row.o, row.server, row.needs, row.ca) == ("kubeconfig", cn, o, server, needs, "ca")
    # super-admin.conf: one cluster-wide instance, placed on no node (kept in the store)
    row = by_name("super-admin.conf")
    assert row.per == "cluster" and row.cert == () and row.key == ()


def test_public_surface_is_exported() -> None:
    for module in (bke.core.pki, bke.core.secrets):
        assert len(module.__all__) == len(set(module.__all__))
        for name in module.__all__:
            assert hasattr(module, name), f"{module.__name__}.{name} missing"
