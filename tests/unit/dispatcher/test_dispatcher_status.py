"""The status read model (pure): records in, a ClusterStatus out; node selection, paging,
the payload budget at 10,000 nodes; the responder's error replies; the CLI's failure report."""
from __future__ import annotations

import json

import pytest

from bke_dispatcher.phases import PHASES as PHASE_TABLE
from bke.contracts.status import ClusterStatus, StatusError, GetStatus, parse_status_reply
from bke_cli.install_follow import failure_code, failure_lines
from bke_dispatcher.status import MAX_REPLY_BYTES, StatusResponder, build_status, fit_reply

INSTALL = {"requestId": "r1", "status": "Running", "startedAt": "2026-12-01T00:00:00+00:00", "finishedAt": "", "phase": "etcd", "message": ""}
ORDER = ["m1", "m2", "m3", "w1", "w2"]
NODES = {
    "m1": {"phase": "etcd", "status": "Succeeded", "step": None},
    "m2": {"phase": "etcd", "status": "Running", "step": None},
    "m3": {"phase": "etcd", "status": "Failed", "step": "wait:etcd-data"},
    "w1": {"phase": "certs", "status": "Succeeded", "step": None},
}
PHASES = {"agents": {"status": "Succeeded", "startedAt": "a", "finishedAt": "b", "ok": "5", "total": "5"},
          "etcd": {"status": "Running", "startedAt": "c", "finishedAt": "", "ok": "1", "failed": "1", "total": "3"}}


def status(install=INSTALL, order=ORDER, records=NODES, rotation=None, **req) -> ClusterStatus:
    return build_status(GetStatus(cluster="c", **req), install, PHASES, order, records, {}, {}, rotation)


def test_phases_in_table_order_with_counts_and_empty_times_as_null():
    doc = status()
    assert [p.name for p in doc.phases] == [p.slug for p in PHASE_TABLE]
    etcd = doc.phases[4]
    assert (etcd.status, etcd.done, etcd.total, etcd.started_at, etcd.finished_at) == ("Running", 1, 3, "c", None)
    assert doc.phases[1].status == "Pending" and doc.phases[1].summary.startswith("preflight")
    assert doc.finished_at is None and doc.kind is None and doc.nodes_changed is False and doc.rotation is None


def test_node_selection_and_counts_cover_every_node():
    default = status()
    assert [(n.hostname, n.status, n.phase, n.step) for n in default.nodes] == [
        ("m2", "Running", "etcd", None), ("m3", "Failed", "etcd", "wait:etcd-data")]
    assert default.node_selection == "failed" and default.nodes_matched == 2 and default.next_offset is None
    c = default.node_counts
    assert (c.total, c.pending, c.running, c.succeeded, c.failed) == (5, 1, 1, 2, 1)  # w2: no command yet
    assert status(nodes="none").nodes == [] and status(nodes="none").node_counts == c
    assert [n.hostname for n in status(nodes="all").nodes] == ORDER  # plan order, Pending included


def test_unhealthy_selection_lists_the_nodes_whose_latest_health_failed():
    health = {"m1": {"status": "Unhealthy", "failing": ["health:etcd-data"]}, "m2": {"status": "Healthy"},
              "w2": {"status": "Unhealthy", "failing": ["health:kubelet"]}}
    doc = build_status(GetStatus(cluster="c", nodes="unhealthy"), INSTALL, PHASES, ORDER, NODES, {}, health, None)
    assert [(n.hostname, n.health.failing) for n in doc.nodes] == [("m1", ["health:etcd-data"]), ("w2", ["health:kubelet"])]
    assert doc.nodes_matched == 2 and doc.node_counts.total == 5


def test_pages_follow_next_offset_to_the_end():
    first = status(nodes="all", limit=2)
    assert [n.hostname for n in first.nodes] == ["m1", "m2"] and first.next_offset == 2 and first.nodes_matched == 5
    last = status(nodes="all", offset=4, limit=2)
    assert [n.hostname for n in last.nodes] == ["w2"] and last.next_offset is None


def test_failure_kind_and_nodes_changed_from_the_install_record():
    failed = {**INSTALL, "status": "Failed", "message": "bad", "kind": "invalid", "nodesChanged": "0"}
    assert status(install=failed).kind == "invalid" and status(install=failed).nodes_changed is False
    assert status(install={**failed, "kind": "", "nodesChanged": "1"}).kind is None
    assert status(install={**failed, "kind": "operational", "nodesChanged": "1"}).nodes_changed is True
    # a kind left over from an earlier failure is not reported once the install runs again
    assert status(install={**INSTALL, "kind": "operational"}).kind is None


def test_rotation_block_from_the_hook():
    rot = {"requestId": "rot-1", "status": "Running", "certificates": ["apiserver"], "done": 1, "total": 3,
           "startedAt": "t", "finishedAt": None, "message": "", "nodes": [{"hostname": "m1", "status": "Succeeded"}]}
    doc = status(rotation=rot)
    assert doc.rotation is not None and doc.rotation.nodes[0].hostname == "m1" and doc.rotation.total == 3
    assert json.loads(doc.to_bytes())["rotation"]["requestId"] == "rot-1"


def test_the_running_join_and_the_last_removal_are_shown_with_their_nodes():
    from bke.contracts.membership import MembershipNode, MembershipView
    from bke_cli.status_cmd import membership_line

    assert status().join is None and status().removal is None  # never one: null, as for a reset
    join = MembershipView(request_id="j1", status="Running", started_at="t0",
                          waiting="waiting for the agents of w3 to register (1/2 sealed; 840 s left)",
                          nodes=[MembershipNode(hostname="w2", status="Running", stage="workers"),
                                 MembershipNode(hostname="w3", status="Pending", stage="node-env")])
    removal = MembershipView(request_id="x1", status="Failed", started_at="t0", finished_at="t1",
                             message="node w1 drain: a PodDisruptionBudget allows no eviction",
                             nodes=[MembershipNode(hostname="w1", status="Failed", stage="drain", reason="pdb")])
    doc = build_status(GetStatus(cluster="c"), INSTALL, PHASES, ORDER, NODES, {}, {}, None, join=join, removal=removal)
    wire = json.loads(doc.to_bytes())
    assert wire["join"]["requestId"] == "j1" and wire["join"]["nodes"][1] == {
        "hostname": "w3", "status": "Pending", "stage": "node-env", "reason": ""}
    assert wire["removal"]["status"] == "Failed" and wire["removal"]["message"].startswith("node w1 drain")
    assert parse_status_reply(doc.to_bytes()) == doc  # the wire form reads back
    assert membership_line("join", join) == ("join j1: Running 0/2 (w2 workers Running, w3 node-env Pending): "
                                             "waiting for the agents of w3 to register (1/2 sealed; 840 s left)")
    assert membership_line("removal", removal) == ("removal x1: Failed 0/1 (w1 drain Failed): "
                                                   "node w1 drain: a PodDisruptionBudget allows no eviction")


def test_10000_nodes_fit_one_nats_payload_page_by_page():
    order = [f"worker-{i:05d}.rack-{i % 40:02d}.dc1.example.internal" for i in range(10_000)]
    records = {h: {"phase": "node-env", "status": "Failed", "step": "check:port-10250"} for h in order}
    sizes = {}
    for limit in (1000, 5000):
        reply = status(order=order, records=records, nodes="all", limit=limit)
        sizes[limit] = len(reply.to_bytes())
    # measured: 122 KB for the default page of 1,000 nodes, 602 KB for the largest page (5,000)
    print(f"status reply, 10,000 nodes: {sizes[1000]} bytes (page of 1,000), {sizes[5000]} bytes (page of 5,000)")
    assert sizes[5000] < MAX_REPLY_BYTES
    none = status(order=order, records=records, nodes="none")
    assert len(none.to_bytes()) < 4096 and none.node_counts.failed == 10_000


def test_fit_reply_halves_the_page_until_it_fits_and_points_to_the_rest():
    order = [f"n{i:05d}-" + "x" * 200 for i in range(5000)]
    nodes = {h: {"phase": "node-env", "status": "Failed", "step": "s" * 100} for h in order}
    reply = build_status(GetStatus(cluster="c", nodes="all", offset=0, limit=5000), INSTALL, PHASES, order, nodes, {}, {}, None)
    assert len(reply.to_bytes()) > MAX_REPLY_BYTES  # too big as built: ~1.7 MB
    data = fit_reply(reply)
    fitted = parse_status_reply(data)
    assert len(data) <= MAX_REPLY_BYTES and isinstance(fitted, ClusterStatus)
    assert fitted.next_offset == len(fitted.nodes) and fitted.nodes[-1].hostname == order[len(fitted.nodes) - 1]


class _Broken:
    async def read(self, req):
        raise ConnectionError("redis down")


async def test_responder_answers_bad_requests_and_outages_with_error_replies():
    responder = StatusResponder(_Broken())  # type: ignore[arg-type]
    bad = parse_status_reply(await responder.answer(b'{"cluster": "c", "nodes": "some"}'))
    assert isinstance(bad, StatusError) and bad.reason == "Invalid" and [e.path for e in bad.errors] == ["nodes"]
    garbage = parse_status_reply(await responder.answer(b"\xff"))
    assert isinstance(garbage, StatusError) and garbage.reason == "Invalid" and garbage.errors
    down = parse_status_reply(await responder.answer(GetStatus(cluster="c").to_bytes()))
    assert isinstance(down, StatusError) and down.reason == "Unavailable" and "redis down" in down.message


@pytest.mark.parametrize("kind, code", [("invalid", 2), ("operational", 1), ("", 1)])
def test_the_follower_names_phase_nodes_and_reason_and_exits_by_kind(kind, code):
    failed = {**INSTALL, "status": "Failed", "message": "1 node(s) failed: m3; m3 step wait:etcd-data: timeout", "kind": kind}
    phases = {**PHASES, "etcd": {**PHASES["etcd"], "status": "Failed"}}
    doc = build_status(GetStatus(cluster="c"), failed, phases, ORDER, NODES, {}, {}, None)
    lines = failure_lines(doc)
    assert lines[0] == "install of c failed in phase etcd: 1 node(s) failed: m3; m3 step wait:etcd-data: timeout"
    assert lines[1] == "failed node(s): m3"
    assert failure_code(doc) == code


def test_addons_are_listed_in_the_order_they_were_applied():
    # Redis hands a hash back in any order; the records' `order` (the addon table's) decides
    records = {"coredns": {"status": "Validated", "order": 3}, "rbac": {"status": "Validated", "order": 0},
               "calico": {"status": "Validated", "order": 2}, "kube-proxy": {"status": "Validated", "order": 1}}
    doc = build_status(GetStatus(cluster="c"), INSTALL, PHASES, ORDER, NODES, records, {}, None)
    assert list(doc.addons) == ["rbac", "kube-proxy", "calico", "coredns"]
    assert list(parse_status_reply(fit_reply(doc)).addons) == ["rbac", "kube-proxy", "calico", "coredns"]
