"""Reset and delete, the pure decisions (no Redis, no bus): the gate, the order (workers first,
etcd members last, a rank at a time), snapshots before any node, what comes next as results
arrive, and a resumed record that carries on where it was."""
from __future__ import annotations

import pytest

from bke.contracts.reset import ResetCluster
from bke.core.plan import plan_spec_text
from bke_dispatcher.command_ids import parse_command_id
from bke_dispatcher.ops.reset.decide import Reset, apply_result, new_reset, next_step, refusal, reset_order, reset_step

SEED = plan_spec_text(open("examples/seed-3m1w.yaml").read()).plan
SPLIT = plan_spec_text(open("examples/split-etcd.yaml").read()).plan


def req(plan, *nodes: str, delete: bool = False, rid: str = "r1") -> ResetCluster:
    return ResetCluster(request_id=rid, cluster=plan.cluster, nodes=list(nodes), delete=delete)


@pytest.mark.parametrize("kw, expect", [
    ({}, ""),
    ({"install": "Failed"}, ""),
    ({"install": "Running"}, "the install of seed is running"),
    ({"paused": True}, "seed is paused: resume it first"),
    ({"nodes": ("nodeX",)}, "nodes: not in the plan of seed: nodeX"),
    ({"nodes": ("node1",), "delete": True}, "nodes: a delete resets every node"),
    ({"plan": None}, "cluster seed has no plan"),
])
def test_one_operation_per_cluster_and_known_nodes(kw, expect):
    r = req(SEED, *kw.pop("nodes", ()), delete=kw.pop("delete", False))
    why = refusal(r, kw.pop("plan", SEED), kw.pop("install", "Succeeded"), **kw)
    assert why.startswith(expect) if expect else why == ""


def test_a_reset_of_etcd_members_that_would_lose_quorum_is_refused_with_the_way_round():
    # one of three: two left, a quorum; a worker beside it: fine
    assert refusal(req(SEED, "master1", "node1"), SEED, "Succeeded") == ""
    two = refusal(req(SEED, "master1", "master2"), SEED, "Succeeded")
    assert two.startswith("nodes: resetting master1, master2 would leave etcd-data 1 working member(s) of 3, "
                          "below its quorum of 2"), two
    assert "`bke apply` without them" in two
    # every member left: the cluster goes as a whole, fine
    assert refusal(req(SEED, "master1", "master2", "master3"), SEED, "Succeeded") == ""
    # a member reset before counts as gone: the second of three is refused, the last two together are not
    before = new_reset(req(SEED, "master1", rid="old"), SEED, "t0", [])
    before.status, before.reset_before = "Succeeded", ["master1"]
    assert refusal(req(SEED, "master2", rid="new"), SEED, "Succeeded", current=before).startswith(
        "nodes: resetting master2 would leave etcd-data 1 working member(s) of 3")
    assert refusal(req(SEED, "master2", "master3", rid="new"), SEED, "Succeeded", current=before) == ""
    # a split cluster: each etcd cluster on its own
    assert refusal(req(SPLIT, "events1", "events2"), SPLIT, "Succeeded").startswith(
        "nodes: resetting events1, events2 would leave etcd-events 1 working member(s) of 3")


def test_a_running_reset_refuses_another_but_not_its_own_redelivery():
    current = new_reset(req(SEED, rid="old"), SEED, "t0", [])
    assert refusal(req(SEED, rid="new"), SEED, "Succeeded", current=current).startswith("reset old of seed is still running")
    assert refusal(req(SEED, rid="old"), SEED, "Succeeded", current=current) == ""


def test_workers_first_etcd_members_last():
    assert reset_order(SEED, {n.hostname for n in SEED.nodes}) == ["node1", "master1", "master2", "master3"]
    order = reset_order(SPLIT, {n.hostname for n in SPLIT.nodes})
    assert order[:4] == ["worker1", "worker2", "worker3", "worker4"]
    assert order[4:9] == ["m1", "m2", "m3", "m4", "m5"]
    assert set(order[9:]) == {"etcd1", "etcd2", "etcd3", "events1", "events2", "events3", "pods1", "pods2", "pods3"}


def _answer(r: Reset, hosts, status="Succeeded", step="", stderr="") -> None:
    """The agents on `hosts` answer every command of theirs in flight."""
    for s in r.snapshots:
        if s.node in hosts and s.status == "Running":
            assert apply_result(r, s.command_id, status, step, stderr)
    for n in r.nodes:
        if n.hostname in hosts and n.status == "Running":
            assert apply_result(r, n.command_id, status, step, stderr)


def _mark(r: Reset, action: str, names) -> None:
    """What the adapter does once it sent the commands of a decision."""
    for s in r.snapshots:
        if action == "snapshot" and s.etcd_cluster in names:
            s.status = "Running"
    for n in r.nodes:
        if action == "send" and n.hostname in names:
            n.status = "Running"


def test_delete_snapshots_every_etcd_cluster_then_resets_rank_by_rank():
    r = new_reset(req(SPLIT, delete=True), SPLIT, "t0", [])
    # 1. every etcd cluster's snapshot first, each on its first member, before any node
    d = next_step(r)
    assert d.action == "snapshot" and d.nodes == ("etcd-data", "etcd-events", "etcd-pods")
    assert [(s.etcd_cluster, s.node) for s in r.snapshots] == [("etcd-data", "etcd1"), ("etcd-events", "events1"),
                                                                ("etcd-pods", "pods1")]
    _mark(r, "snapshot", d.nodes)
    assert next_step(r).action == "wait"
    _answer(r, {"etcd1", "events1", "pods1"})
    # 2. workers together, then the control plane, then the etcd members
    seen = []
    while (d := next_step(r)).action == "send":
        seen.append(d.nodes)
        _mark(r, "send", d.nodes)
        assert next_step(r).action == "wait"  # a rank at a time
        _answer(r, set(d.nodes))
    assert seen[0] == ("worker1", "worker2", "worker3", "worker4") and seen[1] == ("m1", "m2", "m3", "m4", "m5")
    assert len(seen) == 3 and len(seen[2]) == 9
    assert next_step(r).action == "succeed"
    # command ids are fixed by the request: a resumed dispatcher re-sends the same ids
    assert {parse_command_id(n.command_id)[1] for n in r.nodes} == {"reset@r1"}
    assert len({x.command_id for x in [*r.snapshots, *r.nodes]}) == len(r.snapshots) + len(r.nodes)


def test_a_failed_snapshot_stops_the_reset_before_any_node():
    r = new_reset(req(SEED, "node1"), SEED, "t0", [])
    _mark(r, "snapshot", ("etcd-data",))
    _answer(r, {"master1"}, "Failed", "etcd-snapshot/etcd-data", "connection refused")
    d = next_step(r)
    assert d.action == "fail" and "snapshot of etcd-data on master1 failed" in d.reason and "connection refused" in d.reason
    assert all(n.status == "Pending" for n in r.nodes)


def test_a_failed_node_stops_the_reset_with_its_step_and_output():
    r = new_reset(req(SEED), SEED, "t0", [])
    _mark(r, "snapshot", ("etcd-data",))
    _answer(r, {"master1"})
    _mark(r, "send", ("node1",))
    _answer(r, {"node1"}, "Failed", "reset-node", "static pods still running")
    d = next_step(r)
    assert d.action == "fail" and d.reason.startswith("node node1 step reset-node: static pods still running")
    assert not apply_result(r, r.nodes[0].command_id, "Succeeded", "", "")  # a stale duplicate counts once


def test_reset_named_nodes_only_and_skip_a_snapshot_with_no_member_left():
    r = new_reset(req(SEED, "node1", "master2"), SEED, "t0", ["master1"])
    assert [n.hostname for n in r.nodes] == ["node1", "master2"]
    assert r.snapshots[0].node == "master2"  # master1 was reset before: not asked
    gone = new_reset(req(SEED), SEED, "t0", ["master1", "master2", "master3"])
    assert gone.snapshots[0].status == "Skipped" and "no member left" in gone.snapshots[0].reason
    assert next_step(gone).action == "send"  # nothing to snapshot: straight to the nodes


def test_reset_step_holds_the_members_data_dirs_and_binaries_only_on_delete():
    r = new_reset(req(SPLIT, "events2", "worker1"), SPLIT, "t0", [])
    by = {n.hostname: n for n in r.nodes}
    assert reset_step(by["events2"], False).etcd_data_dirs == ["/var/lib/etcd-events"]
    assert reset_step(by["worker1"], False).etcd_data_dirs == [] and not reset_step(by["worker1"], False).binaries
    assert reset_step(by["worker1"], True).binaries


def test_the_record_round_trips_and_keeps_its_progress():
    r = new_reset(req(SEED, delete=True), SEED, "t0", [])
    _mark(r, "snapshot", ("etcd-data",))
    _answer(r, {"master1"})
    back = Reset.from_json(r.to_json())
    assert back == r and next_step(back) == next_step(r)
    assert back.view().snapshots[0].status == "Succeeded" and back.view().total == 4
