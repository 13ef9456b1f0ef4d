"""bke.core.lifecycle.diff: what applying a changed spec to a running cluster does, or why not."""
from __future__ import annotations


import pytest

from bke.core.lifecycle.diff import component_of, diff_plans, quorum, render_diff
from bke.core.plan import plan_spec_text

SPLIT = open("examples/split-etcd.yaml").read()
SEED = open("examples/seed-3m1w.yaml").read()


def plan(text: str):
    out = plan_spec_text(text, "t")
    assert out.ok, out.errors
    return out.plan


def node_doc(host: str, ip: str, roles: str, extra: str = "") -> str:
    return (f"---\napiVersion: bke.bocloud.com/v1beta1\nkind: BKENode\nmetadata: {{name: big-{host}}}\n"
            f"spec:\n  hostname: {host}\n  ip: {ip}\n  role: [{roles}]\n{extra}")


def without(text: str, host: str) -> str:
    docs = text.split("\n---\n")
    return "\n---\n".join(d for d in docs if f"hostname: {host}\n" not in d)


@pytest.fixture(scope="module")
def split():
    return plan(SPLIT)


def full(cur, new_text):
    new = plan(new_text)
    return diff_plans(cur, new, render_diff(cur, new))


def test_same_spec_changes_nothing(split):
    d = full(split, SPLIT)
    assert d.empty and not d.refused and not d.files and d.touched_hosts() == []


def test_two_workers_added_touch_only_them(split):
    d = full(split, SPLIT + node_doc("worker5", "127.0.20.105", "node") + node_doc("worker6", "127.0.20.106", "node"))
    assert not d.refused and d.nodes_added == ("worker5", "worker6")
    assert d.touched_hosts() == ["worker5", "worker6"]
    assert [a.kind for a in d.actions] == ["join", "join"]
    assert not d.certificates  # no SAN names a worker


def test_etcd_events_grows_learner_first_and_apiservers_roll(split):
    text = SPLIT + node_doc("events4", "127.0.20.24", "etcd-event") + node_doc("events5", "127.0.20.25", "etcd-event")
    d = full(split, text)
    assert not d.refused
    (ch,) = d.etcd
    assert ch.cluster == "etcd-events" and ch.added == ("events4", "events5") and not ch.removed
    kinds = [(a.kind, a.host) for a in d.actions]
    # learner then promote, one member at a time, before anything else
    assert kinds[:4] == [("etcd-add-learner", "events4"), ("etcd-promote", "events4"),
                         ("etcd-add-learner", "events5"), ("etcd-promote", "events5")]
    # every apiserver's --etcd-servers-overrides lists the new members: rolled, node by node
    rolled = {a.host for a in d.actions if a.kind == "roll" and a.detail == "kube-apiserver"}
    assert rolled == {"m1", "m2", "m3"}
    # the existing members' manifests name the new initial cluster members too
    assert {a.host for a in d.actions if a.kind == "roll" and a.detail == "etcd-events"} <= {"events1", "events2", "events3"}


def test_removing_etcd_members_and_a_worker(split):
    # 3 -> 1 (the planner wants an odd count in a spec; one member at a time passes through 2)
    text = without(without(without(SPLIT, "worker4"), "events3"), "events2")
    d = full(split, text)
    assert not d.refused, d.refusals
    assert d.nodes_removed == ("events2", "events3", "worker4")
    kinds = [(a.kind, a.host) for a in d.actions]
    assert ("etcd-remove-member", "events2") in kinds and ("etcd-remove-member", "events3") in kinds
    # a member leaves etcd before its node is drained and reset
    assert kinds.index(("etcd-remove-member", "events3")) < kinds.index(("drain", "events3"))
    assert kinds[-3:] == [("drain", "worker4"), ("remove-node", "worker4"), ("reset", "worker4")]


@pytest.mark.parametrize("unhealthy,ok", [
    ((), True),              # 3 -> 2 -> 1, one at a time, all healthy
    (("events3",), True),    # the sick member is among those removed: 2 healthy of 2, then 1 of 1
    (("events1",), False),   # 3 -> 2 leaves events1 (sick) and events3: 1 healthy of 2 is below quorum
])
def test_etcd_removal_quorum(split, unhealthy, ok):
    new = plan(without(without(SPLIT, "events2"), "events3"))
    d = diff_plans(split, new, unhealthy_etcd_members=unhealthy)
    assert (not d.refused) is ok, d.refusals
    if not ok:
        assert d.refusals[0].name == "EtcdQuorum" and "below a quorum" in d.refusals[0].message


def test_a_controller_manager_flag_rolls_only_that_component(split):
    text = SPLIT.replace("      etcdEvents:", "      controllerManager:\n        extraArgs: {kube-api-qps: \"80\"}\n      etcdEvents:")
    d = full(split, text)
    assert not d.refused
    assert {(a.kind, a.host, a.detail) for a in d.actions} == {("roll", "m4", "kube-controller-manager"),
                                                              ("roll", "m5", "kube-controller-manager")}
    assert all(fd.changed == ("/etc/kubernetes/manifests/kube-controller-manager.yaml",) for fd in d.files)


@pytest.mark.parametrize("edit,refusal", [
    (lambda t: t.replace("podSubnet: 10.128.0.0/14", "podSubnet: 10.132.0.0/14"), "NetworkUnchanged"),
    (lambda t: t.replace("host: 127.0.20.250, port: 36443", "host: 127.0.20.251, port: 36443"), "EndpointUnchanged"),
    (lambda t: t.replace("ip: 127.0.20.104", "ip: 127.0.20.144"), "AddressUnchanged"),
    (lambda t: without(without(without(t, "pods1"), "pods2"), "pods3"), "SplitUnchanged"),
])
def test_refused_changes(split, edit, refusal):
    d = diff_plans(split, plan(edit(SPLIT)))
    assert refusal in [r.name for r in d.refusals]


def test_versions_go_to_the_upgrader_alone(split):
    up = SPLIT.replace("kubernetesVersion: v1.33.2", "kubernetesVersion: v1.34.1")
    d = diff_plans(split, plan(up))
    assert d.versions == {"kubernetes": ("v1.33.2", "v1.34.1")} and not d.refused
    mixed = diff_plans(split, plan(up + node_doc("worker5", "127.0.20.105", "node")))
    assert [r.name for r in mixed.refusals] == ["VersionsAlone"]


def test_master_added_reissues_certificates_and_rolls_the_load_balancer():
    cur = plan(SEED)
    # etcd wants an odd count: two masters (with etcd) join, 3 -> 5 members
    text = SEED + "".join(
        f"---\napiVersion: bke.bocloud.com/v1beta1\nkind: BKENode\nmetadata: {{name: seed-{h}}}\n"
        f"spec: {{hostname: {h}, ip: {ip}, role: [master/node, etcd]}}\n"
        for h, ip in (("master4", "127.0.10.5"), ("master5", "127.0.10.6")))
    d = full(cur, text)
    assert not d.refused, d.refusals
    assert d.nodes_added == ("master4", "master5")
    kinds = [(a.kind, a.host) for a in d.actions]
    assert kinds[:4] == [("etcd-add-learner", "master4"), ("etcd-promote", "master4"),
                         ("etcd-add-learner", "master5"), ("etcd-promote", "master5")]
    # no certificate names the other masters; the apiservers' --etcd-servers and the members'
    # --initial-cluster do: both rolled on the old masters, and nothing on the worker
    rolled = {(a.host, a.detail) for a in d.actions if a.kind == "roll"}
    assert rolled == {(m, c) for m in ("master1", "master2", "master3") for c in ("etcd", "kube-apiserver")}
    assert not d.certificates and "node1" not in d.touched_hosts()


@pytest.mark.parametrize("path,component", [
    ("/etc/kubernetes/manifests/kube-apiserver.yaml", "kube-apiserver"),
    ("/etc/kubernetes/manifests/etcd-events.yaml", "etcd-events"),
    ("/etc/haproxy/haproxy.cfg", "haproxy"),
    ("/etc/kubernetes/pki/apiserver.crt", "certificates"),
    ("/etc/containerd/config.toml", "containerd"),
    ("/usr/local/bin/whatever", "node-env"),
])
def test_component_of(path, component):
    assert component_of(path) == component


def test_quorum():
    assert [quorum(n) for n in (1, 2, 3, 4, 5)] == [1, 2, 2, 3, 3]


def test_a_version_spelled_with_or_without_v_is_the_same_release(split):
    """The spec accepts `v3.5.21` and `3.5.21`: an applied spec that only spells a version the
    other way changes nothing, and is not refused as an upgrade."""
    respelled = SPLIT.replace(f"etcdVersion: {split.etcd_version}", f"etcdVersion: {split.etcd_version.lstrip('v')}")
    assert respelled != SPLIT
    d = full(split, respelled)
    assert not d.versions and not d.refused and d.empty
