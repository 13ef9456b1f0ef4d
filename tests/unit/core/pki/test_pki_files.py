"""Least privilege: each node's file set, derived from the table, for the split-etcd example."""
from __future__ import annotations

from tests.unit.core.pki.test_pki_support import SEED, SPLIT, cluster_config, edited, node_doc, seed_plan, split_plan

from bke.core.pki import desired_instances, node_file_refs
from bke.core.spec.roles import is_master

PKI = "/etc/kubernetes/pki"
NO_NODE_KEYS = {"front-proxy-ca", "etcd-ca", "etcd-data-peer-ca", "etcd-events-peer-ca", "etcd-pods-peer-ca"}


def _paths(plan, host):  # type: ignore[no-untyped-def]
    return {f.path for f in node_file_refs(plan)[host]}


def test_worker_gets_only_its_kubelet_credentials() -> None:
    files = node_file_refs(split_plan())["worker1"]
    assert [(f.path, f.mode, f.instance) for f in files] == [
        ("/etc/kubernetes/kubelet.conf", 0o600, "kubelet.conf@worker1"),
        (f"{PKI}/ca.crt", 0o644, "ca"),
    ]


def test_etcd_only_node_gets_its_member_files_and_the_cluster_ca_cert() -> None:
    d = f"{PKI}/etcd-events"
    assert _paths(split_plan(), "events2") == {
        f"{PKI}/ca.crt", f"{d}/ca.crt", f"{d}/peer-ca.crt", f"{d}/server.crt", f"{d}/server.key",
        f"{d}/peer.crt", f"{d}/peer.key", f"{d}/healthcheck-client.crt", f"{d}/healthcheck-client.key",
    }
    assert not any(p.startswith(f"{PKI}/etcd/") or p.startswith(f"{PKI}/etcd-pods/") for p in _paths(split_plan(), "events2"))


def test_apiserver_master_and_controller_manager_master() -> None:
    assert _paths(split_plan(), "m1") == {
        "/etc/kubernetes/admin.conf", "/etc/kubernetes/kubelet.conf",
        f"{PKI}/ca.crt", f"{PKI}/front-proxy-ca.crt", f"{PKI}/etcd/ca.crt", f"{PKI}/sa.key", f"{PKI}/sa.pub",
        *(f"{PKI}/{n}.{e}" for n in ("apiserver", "apiserver-kubelet-client", "front-proxy-client",
                                      "apiserver-etcd-client") for e in ("crt", "key")),
    }
    assert _paths(split_plan(), "m4") == {
        "/etc/kubernetes/admin.conf", "/etc/kubernetes/kubelet.conf",
        "/etc/kubernetes/controller-manager.conf", "/etc/kubernetes/scheduler.conf",
        f"{PKI}/ca.crt", f"{PKI}/ca.key", f"{PKI}/front-proxy-ca.crt", f"{PKI}/sa.key",
    }


def test_keys_are_exactly_where_their_components_run() -> None:
    plan = split_plan()
    files = node_file_refs(plan)
    holders = {}
    for host, refs in files.items():
        for f in refs:
            if f.part == "key":
                holders.setdefault(f.instance, set()).add(host)
    assert holders["ca"] == {n.hostname for n in plan.nodes_running("kube-controller-manager")} == {"m4", "m5"}
    assert holders["sa"] == {n.hostname for n in plan.nodes if n.runs("kube-apiserver") or n.runs("kube-controller-manager")}
    assert not NO_NODE_KEYS & set(holders), "no etcd, peer or front-proxy CA key on any node"
    for host, refs in files.items():  # a per-node key never leaves its node
        for f in refs:
            if "@" in f.instance:
                assert f.instance.endswith(f"@{host}")


def test_admin_kubeconfigs_only_on_masters_and_kubelet_conf_only_on_registering_nodes() -> None:
    plan = split_plan()
    for node in plan.nodes:
        paths = _paths(plan, node.hostname)
        assert ("/etc/kubernetes/admin.conf" in paths) == is_master(node.roles)
        assert "/etc/kubernetes/super-admin.conf" not in paths  # break-glass: in the store only
        assert ("/etc/kubernetes/kubelet.conf" in paths) == node.registers


def test_secret_files_are_0600_and_public_ones_0644() -> None:
    for refs in node_file_refs(split_plan()).values():
        for f in refs:
            assert f.mode == (0o600 if f.part in ("key", "kubeconfig") else 0o644), f
            assert f.secret == (f.mode == 0o600)


def test_split_etcd_rows_exist_only_when_planned() -> None:
    ids = {i.id for i in desired_instances(seed_plan())}
    assert not any("etcd-events" in i or "etcd-pods" in i for i in ids)
    assert {"etcd-ca", "etcd-data-peer-ca", "etcd-data-server@master1"} <= ids

    def add_events(docs):  # type: ignore[no-untyped-def]
        docs += [node_doc(f"ev{i}", f"127.0.10.{20 + i}", ["etcd-event"]) for i in (1, 2, 3)]

    ids = {i.id for i in desired_instances(edited(SEED, add_events))}
    assert {"etcd-events-peer-ca", "etcd-events-server@ev1", "etcd-events-peer@ev3"} <= ids
    assert not any("etcd-pods" in i for i in ids)


def test_kubeconfig_servers_local_apiserver_else_endpoint() -> None:
    seed = {i.id: i for i in desired_instances(seed_plan())}
    assert seed["controller-manager.conf@master2"].server == "https://127.0.10.2:6443"
    assert seed["scheduler.conf@master3"].server == "https://127.0.10.3:6443"
    assert seed["admin.conf@master2"].server == "https://127.0.10.1:6443"
    split = {i.id: i for i in desired_instances(split_plan())}
    assert split["controller-manager.conf@m4"].server == "https://127.0.20.250:36443"  # m4 runs no apiserver
    assert split["kubelet.conf@worker1"].server == "https://127.0.20.250:36443"


def test_apiserver_sans_follow_the_issue() -> None:
    def extra(docs):  # type: ignore[no-untyped-def]
        cluster_config(docs)["apiServer"]["certSANs"] = ["api.big.example.com", "10.1.2.3", "fd00::1"]

    inst = {i.id: i for i in desired_instances(edited(SPLIT, extra))}["apiserver@m2"]
    assert set(inst.dns) == {"m2", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                             "kubernetes.default.svc.cluster.local", "api.big.example.com"}
    assert set(inst.ips) == {"127.0.20.2", "10.96.0.1", "127.0.20.250", "127.0.0.1", "10.1.2.3", "fd00::1"}
