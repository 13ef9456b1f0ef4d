"""bke.core.lifecycle.apply_run: the action table's decisions (which steps, which nodes, in what
order; what is refused by name rather than half done)."""
from __future__ import annotations

import dataclasses

import pytest

from bke.core.lifecycle.apply_run import HANDLERS, NOT_BUILT, apply_order
from bke.core.lifecycle.diff import diff_plans, render_diff
from bke.core.plan import plan_spec_text
from ..upgrade_helpers import events_spec

SEED = open("examples/seed-3m1w.yaml").read()
SPLIT = open("examples/split-etcd.yaml").read()
KCM = "      certificates: {keyAlgorithm: ECDSA-P256}\n      controllerManager:\n        extraArgs: {kube-api-qps: \"80\"}\n"


def plan(text: str):
    out = plan_spec_text(text, "t")
    assert out.ok, out.errors
    return out.plan


@pytest.fixture(scope="module")
def seed():
    return plan(SEED)


def order_of(cur, text: str):
    new = plan(text)
    d = diff_plans(cur, new, render_diff(cur, new))
    return d, apply_order(cur, new, d)


def steps(o):
    return [(s.step, s.group, s.batches, s.drain) for s in o.steps]


def test_a_controller_manager_flag_rolls_each_master_one_at_a_time_and_nothing_else(seed):
    d, o = order_of(seed, SEED.replace("      certificates: {keyAlgorithm: ECDSA-P256}\n", KCM))
    assert not o.refusals
    assert steps(o) == [("pre-checks", "", (), False),
                        ("kube-controller-manager", "", (("master1",), ("master2",), ("master3",)), False)]


def test_nothing_changes_nothing_to_run(seed):
    d, o = order_of(seed, SEED)
    assert d.empty and o.steps == () and o.refusals == ()


def test_a_label_change_is_the_labels_step_alone(seed):
    text = SEED.replace("spec: {hostname: node1, ip: 127.0.10.4, role: [node]}",
                        "spec: {hostname: node1, ip: 127.0.10.4, role: [node], labels: {tier: gold}}")
    d, o = order_of(seed, text)
    assert [a.kind for a in d.actions] == ["set-labels-taints"]
    assert steps(o) == [("pre-checks", "", (), False), ("labels", "", (), False)]


def test_an_etcd_flag_goes_member_by_member_after_a_snapshot_of_that_cluster():
    split = plan(SPLIT)
    d, o = order_of(split, SPLIT.replace('quota-backend-bytes: "4294967296"', 'quota-backend-bytes: "8589934592"'))
    assert not o.refusals
    got = steps(o)
    names = [s[0] for s in got]
    assert names == ["pre-checks", "etcd-snapshots", "etcd"]
    assert got[1][1] == got[2][1] == "etcd-events"
    assert all(len(b) == 1 for b in got[2][2]) and len(got[2][2]) >= 3  # one member per batch
    assert got[1][2] == ((got[2][2][0][0],),)  # the snapshot on the cluster's first member


def test_apiserver_before_controller_manager_whatever_order_the_diff_lists_them():
    split = plan(SPLIT)
    text = SPLIT.replace('extraArgs: {max-requests-inflight: "800"}',
                         'extraArgs: {max-requests-inflight: "900"}\n      controllerManager:\n        extraArgs: {kube-api-qps: "80"}')
    d, o = order_of(split, text)
    assert not o.refusals
    names = [s.step for s in o.steps]
    assert names.index("kube-apiserver") < names.index("kube-controller-manager")
    assert all(len(b) == 1 for s in o.steps for b in s.batches)


def _node(name: str, ip: str, roles: str) -> str:
    return (f"---\napiVersion: bke.bocloud.com/v1beta1\nkind: BKENode\nmetadata: {{name: seed-{name}}}\n"
            f"spec: {{hostname: {name}, ip: {ip}, role: {roles}}}\n")


WITHOUT_NODE1 = SEED.split("---\napiVersion: bke.bocloud.com/v1beta1\nkind: BKENode\nmetadata: {name: seed-node1}")[0]


def test_adding_workers_is_one_join_step_and_nothing_else(seed):
    d, o = order_of(seed, SEED + _node("node2", "127.0.10.5", "[node]") + _node("node3", "127.0.10.6", "[node]"))
    assert not o.refusals
    assert [a.kind for a in d.actions] == ["join", "join"]
    assert steps(o) == [("pre-checks", "", (), False), ("join-nodes", "", (("node2", "node3"),), False)]


def test_removing_a_worker_is_one_removal_step_for_its_three_actions(seed):
    d, o = order_of(seed, WITHOUT_NODE1)
    assert [a.kind for a in d.actions] == ["drain", "remove-node", "reset"]
    assert steps(o) == [("pre-checks", "", (), False), ("remove-nodes", "", (("node1",),), False)]


def test_removals_come_before_joins_and_after_every_roll(seed):
    text = WITHOUT_NODE1.replace("      certificates: {keyAlgorithm: ECDSA-P256}\n", KCM) + _node("node2", "127.0.10.5", "[node]")
    d, o = order_of(seed, text)
    assert [s.step for s in o.steps] == ["pre-checks", "kube-controller-manager", "remove-nodes", "join-nodes"]


def test_more_workers_than_one_request_takes_join_in_several(seed, monkeypatch):
    import bke.core.lifecycle.apply_steps as apply_steps

    monkeypatch.setattr(apply_steps, "MEMBERSHIP_BATCH", 2)  # 1,000 in production (the contract's MAX_NODES)
    extra = "".join(_node(f"w{i}", f"127.0.20.{i + 1}", "[node]") for i in range(5))
    d, o = order_of(seed, SEED + extra)
    [join] = [s for s in o.steps if s.step == "join-nodes"]
    assert join.batches == (("w0", "w1"), ("w2", "w3"), ("w4",))


def test_a_master_without_etcd_joins_at_the_end_like_a_worker(seed):
    d, o = order_of(seed, SEED + _node("master4", "127.0.10.9", "[master/node]"))
    assert not o.refusals, o.refusals
    assert steps(o) == [("pre-checks", "", (), False), ("join-nodes", "", (("master4",),), False)]


def test_two_stacked_masters_leave_their_etcd_members_first_then_the_apiserver_rolls_then_they_are_reset(seed):
    docs = SEED.split("\n---\n")
    without = "\n---\n".join(doc for doc in docs if "hostname: master3" not in doc and "hostname: master2" not in doc)
    assert without != SEED
    d, o = order_of(seed, without)
    assert not o.refusals, o.refusals
    names = [(s.step, s.group) for s in o.steps]
    assert names[:6] == [("pre-checks", ""), ("etcd-snapshots", "etcd-data"),
                         ("etcd-member-remove", "etcd-data:master2"), ("etcd-health", "etcd-data:master2"),
                         ("etcd-member-remove", "etcd-data:master3"), ("etcd-health", "etcd-data:master3")]
    assert ("kube-apiserver", "") in names  # master1's --etcd-servers lists itself alone
    assert o.steps[-1].step == "remove-nodes" and o.steps[-1].batches == (("master2", "master3"),)


def _without(text: str, name: str) -> str:
    head, tail = text.split(f"---\napiVersion: bke.bocloud.com/v1beta1\nkind: BKENode\nmetadata: {{name: {name}}}")
    return head + "---" + tail.split("---", 1)[1]


def test_a_master_joining_a_vip_cluster_rolls_every_master_s_load_balancer_before_it_joins():
    split = plan(SPLIT)
    d, o = order_of(split, SPLIT + _node("m6", "127.0.20.6", "[master, apiserver]"))
    assert not o.refusals, o.refusals
    # haproxy gains a backend and keepalived a peer (and new priorities) on every master; the
    # new master gets its own load balancer in its join (the install's load-balancer phase)
    rolled = {(a.host, a.detail) for a in d.actions if a.kind == "roll"}
    assert rolled == {(f"m{i}", c) for i in range(1, 6) for c in ("haproxy", "keepalived")}
    assert steps(o) == [("pre-checks", "", (), False),
                        ("load-balancer", "", (("m1",), ("m2",), ("m3",), ("m4",), ("m5",)), False),
                        ("join-nodes", "", (("m6",),), False)]


def test_a_leaving_master_stops_its_load_balancer_first_then_the_others_roll_then_it_is_removed():
    split = plan(SPLIT)
    d, o = order_of(split, _without(SPLIT, "big-m3"))
    assert not o.refusals, o.refusals
    assert steps(o) == [("pre-checks", "", (), False),
                        ("load-balancer", "", (("m3",), ("m1",), ("m2",), ("m4",), ("m5",)), False),
                        ("remove-nodes", "", (("m3",),), False)]


SANS = "      certificates: {keyAlgorithm: ECDSA-P256}\n      apiServer: {certSANs: [api.seed.example.com]}\n"


def test_new_apiserver_names_reissue_then_roll_each_apiserver_with_its_certificate(seed):
    d, o = order_of(seed, SEED.replace("      certificates: {keyAlgorithm: ECDSA-P256}\n", SANS))
    assert not o.refusals, o.refusals
    # only the apiserver certificates name the endpoint's SANs; each master's manifest carries
    # their names (bke.core.pki.pod_certs), so the same change rolls each apiserver
    assert dict(d.certificates) == {f"apiserver@master{i}": ("dns",) for i in (1, 2, 3)}
    assert {(a.kind, a.host, a.detail) for a in d.actions if a.kind == "roll"} == \
        {("roll", f"master{i}", "kube-apiserver") for i in (1, 2, 3)}
    assert steps(o) == [("pre-checks", "", (), False), ("certificates", "", (), False),
                        ("kube-apiserver", "", (("master1",), ("master2",), ("master3",)), False)]


def test_reissue_with_a_removal_in_the_same_apply_is_refused_by_name(seed):
    text = SEED.replace("      certificates: {keyAlgorithm: ECDSA-P256}\n", SANS)
    d, o = order_of(seed, text + "".join(_node(f"node{i}", f"127.0.10.{10 + i}", "[node]") for i in (2,)))
    assert not o.refusals  # a join after the re-issue is fine: the new node gets its own
    cur = plan(SEED + _node("node2", "127.0.10.12", "[node]"))
    d, o = order_of(cur, text)  # node2 leaves while the names change
    assert o.steps == () and any("same apply as removing nodes (node2)" in r.message for r in o.refusals)


def test_a_certificate_no_static_pod_reads_is_refused_not_half_delivered(seed):
    d = diff_plans(seed, seed)
    from dataclasses import replace
    from bke.core.lifecycle.diff import Action
    d = replace(d, actions=(Action("reissue-certificates", "node1", "kubelet.conf@node1"),))
    o = apply_order(seed, seed, d)
    assert o.steps == () and [r.name for r in o.refusals] == ["NotBuilt"]
    assert "kubelet.conf@node1" in o.refusals[0].message


def test_every_diff_kind_has_a_handler_or_a_refusal():
    kinds = {"etcd-add-learner", "etcd-promote", "reissue-certificates", "join", "roll", "apply-addons",
             "set-labels-taints", "etcd-remove-member", "drain", "remove-node", "reset"}
    assert kinds == set(HANDLERS) | set(NOT_BUILT)
    assert not set(HANDLERS) & set(NOT_BUILT)


def test_a_vrrp_change_rolls_keepalived_on_each_master_one_at_a_time():
    split = plan(SPLIT)
    d, o = order_of(split, SPLIT.replace("virtualRouterId: 77", "virtualRouterId: 78"))
    assert {a.detail for a in d.actions if a.kind == "roll"} == {"keepalived"}
    assert steps(o) == [("pre-checks", "", (), False),
                        ("load-balancer", "", (("m1",), ("m2",), ("m3",), ("m4",), ("m5",)), False)]


def _grow_spec(events: tuple[str, ...]) -> str:
    return events_spec("grow", "127.0.23", events)


def test_growing_etcd_events_adds_joins_promotes_and_checks_each_member_then_rolls_the_apiserver():
    one = plan(_grow_spec(("events1",)))
    d, o = order_of(one, _grow_spec(("events1", "events2", "events3")))
    assert not o.refusals, o.refusals
    got = [(s.step, s.group, s.batches) for s in o.steps]
    g2, g3 = "etcd-events:events2", "etcd-events:events3"
    assert got[:11] == [
        ("pre-checks", "", ()),
        ("etcd-snapshots", "etcd-events", (("events1",),)),
        ("etcd-member-add", g2, (("events1",),)),
        ("join-nodes", g2, (("events2",),)),
        ("etcd-member-promote", g2, (("events1",),)),
        ("etcd-health", g2, (("events1", "events2"),)),
        ("etcd-member-add", g3, (("events1",),)),
        ("join-nodes", g3, (("events3",),)),
        ("etcd-member-promote", g3, (("events1",),)),
        ("etcd-health", g3, (("events1", "events2", "events3"),)),
        ("etcd", "etcd-events", (("events1",),)),  # its manifest's member list: rolled once the others serve
    ]
    assert got[11:] == [("kube-apiserver", "", (("m1",),))]  # --etcd-servers-overrides names the three
    assert not any(s.step == "join-nodes" and s.group == "" for s in o.steps)  # no worker join


def test_shrinking_etcd_events_removes_each_member_then_resets_its_node():
    three = plan(_grow_spec(("events1", "events2", "events3")))
    d, o = order_of(three, _grow_spec(("events1",)))
    assert not o.refusals, o.refusals
    names = [(s.step, s.group) for s in o.steps]
    assert names[:6] == [("pre-checks", ""), ("etcd-snapshots", "etcd-events"),
                         ("etcd-member-remove", "etcd-events:events2"), ("etcd-health", "etcd-events:events2"),
                         ("etcd-member-remove", "etcd-events:events3"), ("etcd-health", "etcd-events:events3")]
    assert names[-1] == ("remove-nodes", "") and o.steps[-1].batches == (("events2", "events3"),)
    assert ("kube-apiserver", "") in names


def test_an_etcd_removal_that_loses_quorum_is_refused():
    three = plan(_grow_spec(("events1", "events2", "events3")))
    d = diff_plans(three, plan(_grow_spec(("events1",))), [], unhealthy_etcd_members={"etcd-events": ["events1"]})
    assert any(r.name == "EtcdQuorum" for r in d.refusals), d.refusals


def _roles(text: str, **roles: str) -> str:
    for host, extra in roles.items():
        i = text.index(f"hostname: {host},")
        end = text.index("]}", i)
        text = text[:end] + extra + text[end:]
    return text


def test_a_scheduler_moved_between_masters_starts_where_it_goes_before_it_stops_where_it_leaves():
    only_master1 = plan(_roles(SEED, master1=", scheduler"))
    d, o = order_of(only_master1, _roles(SEED, master3=", scheduler"))
    assert not o.refusals, o.refusals
    [sched] = [s for s in o.steps if s.step == "kube-scheduler"]
    assert sched.batches == (("master3",), ("master1",))  # one at a time: the new one first
    assert not any(s.step in ("kube-apiserver", "kube-controller-manager") for s in o.steps)


def test_the_endpoint_masters_apiserver_may_not_move_and_etcd_roles_may_not_change(seed):
    # without a load balancer the endpoint is master1's address: the spec itself is refused
    out = plan_spec_text(_roles(SEED, master2=", apiserver", master3=", apiserver"), "t")
    assert not out.ok and "master1" in out.errors[0].message and "runs no kube-apiserver" in out.errors[0].message
    # a worker becoming the first etcd-events member would add a split etcd: the diff's refusal
    d, o = order_of(seed, SEED.replace("spec: {hostname: node1, ip: 127.0.10.4, role: [node]}",
                                       "spec: {hostname: node1, ip: 127.0.10.4, role: [node, etcd-event]}"))
    assert [r.name for r in d.refusals] == ["SplitUnchanged"] and o == type(o)(), (d.refusals, o)


def test_a_master_that_stops_taking_workloads_rolls_its_kubelet_and_marks_alone(seed):
    """master/node -> master changes what the node is marked with (the control-plane taint) and
    its kubelet configuration, not what it runs: carried out in place, the kubelet's roll
    draining the node first, then the labels step. A worker becoming a master runs more: refused."""
    text = SEED.replace("hostname: master3, ip: 127.0.10.3, role: [master/node, etcd]",
                        "hostname: master3, ip: 127.0.10.3, role: [master, etcd]")
    d, o = order_of(seed, text)
    assert dict(d.roles_changed) == {"master3": (("master/node", "etcd"), ("master", "etcd"))}
    assert not o.refusals, o.refusals
    assert steps(o) == [("pre-checks", "", (), False), ("masters-runtime", "", (("master3",),), True),
                        ("labels", "", (), False)]


def test_a_worker_becoming_a_master_joins_again_with_its_new_roles_and_nothing_of_it_is_rolled(seed):
    d, o = order_of(seed, SEED.replace("spec: {hostname: node1, ip: 127.0.10.4, role: [node]}",
                                       "spec: {hostname: node1, ip: 127.0.10.4, role: [master/node]}"))
    assert {(a.kind, a.host, a.detail) for a in d.actions if a.kind == "roll"} == \
        {("roll", "node1", c) for c in ("kube-apiserver", "kube-controller-manager", "kube-scheduler")}
    assert not o.refusals, o.refusals
    # its control plane comes with its join (node-env, certs, control-plane-join, health: the
    # dispatcher's phases for a master, ensures), after the labels step marked it a master
    assert steps(o) == [("pre-checks", "", (), False), ("labels", "", (), False), ("join-nodes", "", (("node1",),), False)]


# master3 stops being an etcd member while node1 becomes one (etcd-data keeps three members)
SWAP_ETCD = SEED.replace("hostname: master3, ip: 127.0.10.3, role: [master/node, etcd]",
                         "hostname: master3, ip: 127.0.10.3, role: [master/node]").replace(
    "spec: {hostname: node1, ip: 127.0.10.4, role: [node]}", "spec: {hostname: node1, ip: 127.0.10.4, role: [node, etcd]}")


# ... and node1 an etcd-only member rather than a worker that is one too
ETCD_ONLY = SWAP_ETCD.replace("role: [node, etcd]}", "role: [etcd]}")


def test_a_member_leaving_its_etcd_cluster_in_place_is_removed_then_its_pod_data_and_certificates_go(seed):
    """master3 [master/node, etcd] -> [master/node] while node1 becomes a member: node1 is added
    first (adds before removals), then master3 removed from etcd-data, the members that stay
    and every apiserver rolled with the new member list, then master3's member taken away on
    the node (its pod, then its data: LeaveEtcdMember) and the etcd certificates it no longer
    needs, after the certs service sealed its bundle again without them."""
    from bke.contracts.agent_steps import LeaveEtcdMember
    from bke.core.upgrade.node_commands import node_upgrade_steps

    d, o = order_of(seed, SWAP_ETCD)
    assert not o.refusals, o.refusals
    g1, g3 = "etcd-data:node1", "etcd-data:master3"
    assert [(s.step, s.group, s.batches) for s in o.steps] == [
        ("pre-checks", "", ()), ("etcd-snapshots", "etcd-data", (("master1",),)), ("certificates", "", ()),
        ("etcd-member-add", g1, (("master1",),)), ("join-nodes", g1, (("node1",),)),
        ("etcd-member-promote", g1, (("master1",),)), ("etcd-health", g1, (("master1", "master2", "master3", "node1"),)),
        ("etcd-member-remove", g3, (("master1",),)), ("etcd-health", g3, (("master1", "master2", "node1"),)),
        ("etcd", "etcd-data", (("master1",), ("master2",))),  # not master3's: it has left
        ("kube-apiserver", "", (("master1",), ("master2",), ("master3",))), ("cleanup", "", (("master3",),))]
    cleanup = node_upgrade_steps("cleanup", "", seed, plan(SWAP_ETCD), "master3", {}, {}, {})
    assert cleanup[0] == LeaveEtcdMember(id="leave:etcd-data", manifest="/etc/kubernetes/manifests/etcd.yaml",
                                         data_dir="/var/lib/etcd", timeout_s=cleanup[0].timeout_s)
    gone = {st.path for st in cleanup[1:]}
    assert {"/etc/kubernetes/pki/etcd/peer.key", "/etc/kubernetes/pki/etcd/server.key"} <= gone
    # what its apiserver still reads stays: etcd's CA and its own etcd client certificate
    assert not gone & {"/etc/kubernetes/pki/etcd/ca.crt", "/etc/kubernetes/pki/apiserver-etcd-client.key"}


def test_a_worker_that_becomes_etcd_only_is_drained_rolled_standalone_cleaned_then_its_node_object_deleted():
    """node1 [node, etcd] -> [etcd]: its kubelet stops registering. Drained (the runtime's roll,
    which makes its kubelet standalone), then what a registering node alone needs taken away
    (kubelet.conf, crictl's configuration, the pod network's sysctls), then its Node object
    deleted through the API; its etcd member is left as it runs."""
    from bke.contracts.agent_steps import RemoveFile, SystemdUnit, WaitHealth
    from bke.core.render.context import RenderInputs
    from bke.core.render.render import render_cluster
    from bke.core.upgrade.node_commands import node_upgrade_steps

    worker, etcd_only = plan(SWAP_ETCD), plan(ETCD_ONLY)
    d, o = order_of(worker, ETCD_ONLY)
    assert not o.refusals, o.refusals
    assert steps(o) == [("pre-checks", "", (), False), ("certificates", "", (), False), ("drain-nodes", "", (("node1",),), False),
                        ("masters-runtime", "", (("node1",),), True), ("cleanup", "", (("node1",),), False),
                        ("delete-node-objects", "", (("node1",),), False), ("labels", "", (), False)]
    inputs = RenderInputs(vrrp_password="x")
    old, new = render_cluster(worker, inputs), render_cluster(etcd_only, inputs)
    files = lambda r: {f.path: f for f in r.node("node1").files}  # noqa: E731
    cleanup = node_upgrade_steps("cleanup", "", worker, etcd_only, "node1", files(old), files(new), {})
    removed = [st for st in cleanup if isinstance(st, RemoveFile)]
    assert cleanup[:len(removed)] == removed  # no LeaveEtcdMember: it stays a member
    gone = [st.path for st in removed]
    assert gone[:2] == ["/etc/crictl.yaml", "/etc/sysctl.d/99-bke.conf"]
    assert "/etc/kubernetes/kubelet.conf" in gone and not any("/pki/etcd/" in p for p in gone)
    # then its kubelet restarted on the standalone configuration, before the Node is deleted
    restart, health = cleanup[len(removed):]
    assert isinstance(restart, SystemdUnit) and (restart.unit, restart.action) == ("kubelet.service", "restart")
    assert isinstance(health, WaitHealth) and "10248" in health.url


def test_a_worker_becoming_etcd_only_in_one_apply_is_drained_then_joins_etcd_then_stops_registering(seed):
    """node1 [node] -> [etcd] while master3 leaves etcd-data ("moves" and "sheds"): node1 is
    cordoned and drained first (its join writes the standalone kubelet configuration), joins
    etcd-data as a learner, is promoted; master3 is removed; the rolls; node1's runtime rolled
    (never uncordoned), both cleaned up (node1's kubelet restarted standalone), then node1's Node
    object deleted."""
    d, o = order_of(seed, ETCD_ONLY)
    assert not o.refusals, o.refusals
    got = [(s.step, s.group, s.batches) for s in o.steps]
    assert got[2:5] == [("certificates", "", ()), ("drain-nodes", "", (("node1",),)),
                        ("etcd-member-add", "etcd-data:node1", (("master1",),))]
    assert got[-5:] == [("kube-apiserver", "", (("master1",), ("master2",), ("master3",))),
                        ("masters-runtime", "", (("node1",),)), ("cleanup", "", (("master3",), ("node1",))),
                        ("delete-node-objects", "", (("node1",),)), ("labels", "", ())]


def test_a_role_change_that_would_take_the_kubelet_away_is_refused(seed):
    """No role in today's table takes a node's kubelet or containerd away; should one ever,
    the run refuses it by name rather than leave the node half changed."""
    from bke.core.lifecycle.apply_run import role_change

    bare = seed.node("node1").model_copy(update={"components": ["containerd"]})
    new = seed.model_copy(update={"nodes": [bare if n.hostname == "node1" else n for n in seed.nodes]})
    assert role_change(seed, new, "node1") == "other"
    d = dataclasses.replace(diff_plans(seed, new, []), roles_changed={"node1": (("node",), ("node",))})
    o = apply_order(seed, new, d)
    assert o.steps == () and "stops running its kubelet or container runtime" in o.refusals[0].message, o


def test_a_master_becoming_an_etcd_member_worker_joins_the_cluster_then_sheds_its_control_plane():
    """m2 [master] -> [node, etcd-event] ("moves"): it joins etcd-events (learner, join again,
    promote) like any new member, then its static pods are taken away one component at a time
    (kept by `_rejoin`: a join never takes anything away), then the master-only files go."""
    from bke.contracts.agent_steps import RemoveFile
    from bke.core.render.result import RenderedFile
    from bke.core.upgrade.node_commands import node_upgrade_steps

    cur = plan(_grow_spec(("events1",)) + _member_node("m2", "127.0.23.2", "[master]"))
    text = _grow_spec(("events1", "events2")) + _member_node("m2", "127.0.23.2", "[node, etcd-event]")
    d, o = order_of(cur, text)
    assert not o.refusals, o.refusals
    got = [(s.step, s.group, s.batches) for s in o.steps]
    assert got[7:11] == [("etcd-member-add", "etcd-events:m2", (("events1",),)), ("join-nodes", "etcd-events:m2", (("m2",),)),
                         ("etcd-member-promote", "etcd-events:m2", (("events1",),)),
                         ("etcd-health", "etcd-events:m2", (("events1", "events2", "m2"),))]
    assert got[11:] == [("etcd", "etcd-events", (("events1",),)), ("kube-apiserver", "", (("m1",), ("m2",))),
                        ("kube-controller-manager", "", (("m2",),)), ("kube-scheduler", "", (("m2",),)),
                        ("cleanup", "", (("m2",),)), ("labels", "", ())]
    manifest = "/etc/kubernetes/manifests/kube-scheduler.yaml"
    gone = node_upgrade_steps("kube-scheduler", "", cur, plan(text), "m2", {manifest: RenderedFile(manifest, 0o600, b"x")}, {}, {})
    assert gone == [RemoveFile(id="remove:kube-scheduler", path="/etc/kubernetes/manifests/kube-scheduler.yaml")]


def test_members_moving_between_etcd_clusters_join_the_new_one_then_leave_the_old_one():
    """x2 moves from etcd-data to etcd-events while events3 moves the other way, in one apply
    ("moves"): each joins the cluster it goes to (learner, join again with JoinNodes.rejoin
    naming only what it keeps, promote), is removed from the one it leaves after that cluster's
    additions, then its old member is taken away on the node (the cleanup step)."""
    from bke.core.lifecycle.apply_run import role_change

    base = _grow_spec(("events1", "events2", "events3")) + _member_node("x1", "127.0.23.31", "[etcd]") \
        + _member_node("x2", "127.0.23.32", "[etcd]")
    moved = base.replace("hostname: x2, ip: 127.0.23.32, role: [etcd]", "hostname: x2, ip: 127.0.23.32, role: [etcd-event]")
    moved = moved.replace("hostname: events3, ip: 127.0.23.23, role: [etcd-event]",
                          "hostname: events3, ip: 127.0.23.23, role: [etcd]")
    cur, new = plan(base), plan(moved)
    assert {h: role_change(cur, new, h) for h in ("x2", "events3")} == {"x2": "moves", "events3": "moves"}
    d, o = order_of(cur, moved)
    assert not o.refusals, o.refusals
    got = [(s.step, s.group, s.batches) for s in o.steps]
    assert got[:3] == [("pre-checks", "", ()), ("etcd-snapshots", "etcd-data", (("etcd1",),)),
                       ("etcd-snapshots", "etcd-events", (("events1",),))]
    assert got[3] == ("certificates", "", ())
    members = [(st, g) for st, g, _ in got if g and ":" in g]
    assert members == [
        ("etcd-member-add", "etcd-data:events3"), ("join-nodes", "etcd-data:events3"),
        ("etcd-member-promote", "etcd-data:events3"), ("etcd-health", "etcd-data:events3"),
        ("etcd-member-remove", "etcd-data:x2"), ("etcd-health", "etcd-data:x2"),
        ("etcd-member-add", "etcd-events:x2"), ("join-nodes", "etcd-events:x2"),
        ("etcd-member-promote", "etcd-events:x2"), ("etcd-health", "etcd-events:x2"),
        ("etcd-member-remove", "etcd-events:events3"), ("etcd-health", "etcd-events:events3")]
    # the members that stay and the apiserver roll with the new lists, then both old members go
    assert got[16:] == [("etcd", "etcd-data", (("etcd1",), ("x1",))), ("etcd", "etcd-events", (("events1",), ("events2",))),
                        ("kube-apiserver", "", (("m1",),)), ("cleanup", "", (("events3",), ("x2",)))]


def test_a_master_becoming_a_worker_sheds_its_control_plane_then_the_files_only_a_master_holds(seed):
    """master3 [master/node, etcd] -> [node, etcd]: its bundle sealed again for the plan without
    its master files (the certificates step), its static pods' manifests taken away one
    component at a time, then its master-only certificates, keys and kubeconfigs; its etcd
    member stays. In the split example a master that stops being one also stops its load
    balancer first, before the other masters' roll without it."""
    from bke.core.upgrade.node_commands import node_upgrade_steps

    text = SEED.replace("hostname: master3, ip: 127.0.10.3, role: [master/node, etcd]",
                        "hostname: master3, ip: 127.0.10.3, role: [node, etcd]")
    d, o = order_of(seed, text)
    assert not o.refusals, o.refusals
    assert steps(o) == [("pre-checks", "", (), False), ("certificates", "", (), False),
                        ("kube-apiserver", "", (("master3",),), False), ("kube-controller-manager", "", (("master3",),), False),
                        ("kube-scheduler", "", (("master3",),), False), ("cleanup", "", (("master3",),), False),
                        ("labels", "", (), False)]
    gone = [st.path for st in node_upgrade_steps("cleanup", "", seed, plan(text), "master3", {}, {}, {})]
    assert {"/etc/kubernetes/pki/ca.key", "/etc/kubernetes/pki/sa.key", "/etc/kubernetes/admin.conf",
            "/etc/kubernetes/pki/apiserver.key", "/etc/kubernetes/pki/apiserver-etcd-client.key"} <= set(gone)
    assert not any("/pki/etcd/" in p and not p.endswith("ca.crt") for p in gone)  # its etcd member's own stay
    assert "/etc/kubernetes/kubelet.conf" not in gone and "/etc/kubernetes/pki/ca.crt" not in gone
    # a removal in the same apply: refused (the certificates step stores the plan first)
    d, o = order_of(seed, text.split("---\napiVersion: bke.bocloud.com/v1beta1\nkind: BKENode\nmetadata: {name: seed-node1}")[0])
    assert o.steps == () and "in the same apply as removing nodes (node1)" in o.refusals[0].message

    split = plan(SPLIT)
    m4 = SPLIT.replace("hostname: m4\n  ip: 127.0.20.4\n  role: [master, controller-manager, scheduler]",
                       "hostname: m4\n  ip: 127.0.20.4\n  role: [node]")
    assert m4 != SPLIT
    d, o = order_of(split, m4)
    assert not o.refusals, o.refusals
    [lb] = [s for s in o.steps if s.step == "load-balancer"]
    assert lb.batches == (("m4",), ("m1",), ("m2",), ("m3",), ("m5",))
    gone = node_upgrade_steps("load-balancer", "", split, plan(m4), "m4", {}, {}, {})
    assert [st.path for st in gone] == ["/etc/kubernetes/manifests/keepalived.yaml", "/etc/kubernetes/manifests/haproxy.yaml",
                                        "/etc/keepalived/keepalived.conf", "/etc/keepalived/check_apiserver.sh",
                                        "/etc/haproxy/haproxy.cfg"]


def test_workers_becoming_etcd_members_join_inside_the_membership_steps_then_the_apiserver_rolls():
    base = _grow_spec(("events1",)) + _member_node("w1", "127.0.23.41", "[node]") + _member_node("w2", "127.0.23.42", "[node]")
    d, o = order_of(plan(base), base.replace("role: [node]}", "role: [node, etcd-event]}"))
    assert not o.refusals, o.refusals
    got = [(s.step, s.group, s.batches) for s in o.steps]
    member = lambda w, healthy: [  # noqa: E731 - one member's steps, read as the table they are
        ("etcd-member-add", f"etcd-events:{w}", (("events1",),)), ("join-nodes", f"etcd-events:{w}", ((w,),)),
        ("etcd-member-promote", f"etcd-events:{w}", (("events1",),)), ("etcd-health", f"etcd-events:{w}", (healthy,))]
    assert got == [("pre-checks", "", ()), ("etcd-snapshots", "etcd-events", (("events1",),)),
                   *member("w1", ("events1", "w1")), *member("w2", ("events1", "w1", "w2")),
                   ("etcd", "etcd-events", (("events1",),)), ("kube-apiserver", "", (("m1",),)), ("labels", "", ())]
    # an etcd-data member joining etcd-events too: inside etcd-events' membership steps, as a
    # new member (the dispatcher starts it there only: JoinNodes.rejoin names its etcd-data)
    both = base.replace("hostname: etcd1, ip: 127.0.23.11, role: [etcd]", "hostname: etcd1, ip: 127.0.23.11, role: [etcd, etcd-event]")
    both = both.replace("hostname: w1, ip: 127.0.23.41, role: [node]", "hostname: w1, ip: 127.0.23.41, role: [node, etcd-event]")
    assert both.count("etcd-event]") == 3
    d, o = order_of(plan(base), both)
    assert not o.refusals, o.refusals
    got = [(s.step, s.group, s.batches) for s in o.steps]
    assert got[2:6] == member("etcd1", ("events1", "etcd1")) and got[6:10] == member("w1", ("events1", "etcd1", "w1"))
    assert ("etcd", "etcd-data", (("etcd1",),)) not in got  # its etcd-data member is left as it runs


def test_the_dry_run_shows_what_the_apply_would_refuse_as_not_built(seed):
    """The planner's answer (`bke apply --dry-run`) carries apply_order's refusals too: a role
    change the run cannot carry out is refused by name before anything is sent."""
    from bke_planner.changes import changes_of

    # master3 stops being a master while node1 is removed: one apply cannot do both yet
    text = SEED.replace("hostname: master3, ip: 127.0.10.3, role: [master/node, etcd]",
                        "hostname: master3, ip: 127.0.10.3, role: [node, etcd]")
    new = plan(text.split("---\napiVersion: bke.bocloud.com/v1beta1\nkind: BKENode\nmetadata: {name: seed-node1}")[0])
    answer = changes_of("r", new, seed, "d0")
    assert {r.path for r in answer.refusals} == {"NotBuilt"}, answer.refusals
    assert "in the same apply as removing nodes (node1)" in answer.refusals[0].message
    fine = changes_of("r", plan(SEED.replace("      certificates: {keyAlgorithm: ECDSA-P256}\n", KCM)), seed, "d0")
    assert fine.refusals == []


def _member_node(h: str, ip: str, roles: str) -> str:
    return (f"---\napiVersion: bke.bocloud.com/v1beta1\nkind: BKENode\nmetadata: {{name: grow-{h}}}\n"
            f"spec: {{hostname: {h}, ip: {ip}, role: {roles}}}\n")


TWO_JOINT = (_member_node("x1", "127.0.23.31", "[etcd, etcd-event]")
             + _member_node("x2", "127.0.23.32", "[etcd, etcd-event]"))


def test_a_node_joining_two_etcd_clusters_is_added_to_both_joined_once_then_promoted_in_each():
    from bke.core.lifecycle.apply_run import member_join

    one = plan(_grow_spec(("events1",)))
    grown = plan(_grow_spec(("events1",)) + TWO_JOINT)
    d, o = order_of(one, _grow_spec(("events1",)) + TWO_JOINT)
    assert not o.refusals, o.refusals
    members = [(s.step, s.group, s.batches) for s in o.steps if s.group and s.step != "etcd-snapshots"
               and s.step != "etcd"]
    block = lambda x, before_data, before_events: [  # noqa: E731 - one node's block, read as the table it is
        ("etcd-member-add", f"etcd-data:{x}", (("etcd1",),)),
        ("etcd-member-add", f"etcd-events:{x}", (("events1",),)),
        ("join-nodes", f"etcd-data:{x}", ((x,),)),  # once, for both clusters
        ("etcd-member-promote", f"etcd-data:{x}", (("etcd1",),)),
        ("etcd-health", f"etcd-data:{x}", (("etcd1", *before_data, x),)),
        ("etcd-member-promote", f"etcd-events:{x}", (("events1",),)),
        ("etcd-health", f"etcd-events:{x}", (("events1", *before_events, x),)),
    ]
    assert members == block("x1", (), ()) + block("x2", ("x1",), ("x1",))
    # the one join starts the node's member in each cluster with that cluster's member list
    assert member_join(one, grown, "etcd-data:x1") == [
        ("etcd-data", "x1", "etcd1=https://127.0.23.11:2380,x1=https://127.0.23.31:2380"),
        ("etcd-events", "x1", "events1=https://127.0.23.21:2382,x1=https://127.0.23.31:2382")]
    assert [j.step for j in o.steps].count("join-nodes") == 2  # x1 and x2, nothing else joins
