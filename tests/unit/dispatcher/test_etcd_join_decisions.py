"""etcd-only nodes joining a running cluster, the pure decisions (no Redis, no bus): the gate
(each joining etcd member named in `etcdJoins` once per etcd cluster it is a member of in the
stored plan, nothing else; masters still refused), the phases such a node runs (the install's:
node-env, certs, etcd, health; no workers phase, no labels), the etcd joins kept in the record
(form version 2, version 1 still read) and carried to the renderer's request."""
from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from bke.contracts.membership import JoinNodes, MembershipEtcdJoin, MembershipRejoin
from bke.contracts.render import RenderManifests
from bke.adapters.state.conversion import CONVERTERS, convert, header_version, writes
from bke.adapters.state.plans import plan_digest
from bke.core.state.schema import SCHEMA_FIELD, record_kind
from bke_dispatcher.ops.join.decide import Join, join_refusal, new_join, next_step, phases_of
from bke_dispatcher.ops.join.etcd import EtcdJoinRecord

from tests.unit.core.render.test_render_support import plan_of, spec_text

NODES = [
    ("m1", "10.0.0.1", ["master/node"]),
    ("e1", "10.0.0.11", ["etcd"]),
    ("e2", "10.0.0.12", ["etcd"]),  # new: etcd-data
    ("v1", "10.0.0.21", ["etcd-event"]),
    ("v2", "10.0.0.22", ["etcd-event", "etcd"]),  # new: a member of both etcd clusters
    ("w1", "10.0.0.31", ["node"]),  # new: a worker
    ("wx", "10.0.0.32", ["node", "etcd-event"]),  # new: a worker that is an etcd-events member too
]
PLAN = plan_of(spec_text(NODES, etcd="v3.5.1", endpoint=None))
DIGEST = plan_digest(PLAN.to_json())
PEER = {n.hostname: n.ip for n in PLAN.nodes}


def ej(member: str, cluster: str = "etcd-data", initial: str | None = None) -> MembershipEtcdJoin:
    return MembershipEtcdJoin(etcd_cluster=cluster, member=member,
                              initial_cluster=initial or f"e1=https://10.0.0.11:2380,{member}=https://{PEER[member]}:2380")


def req(nodes: tuple[str, ...], joins: list[MembershipEtcdJoin] | None,
        running: dict[str, list[str]] | None = None) -> JoinNodes:
    rejoin = [MembershipRejoin(hostname=h, running=r) for h, r in running.items()] if running else None
    return JoinNodes(request_id="j1", cluster=PLAN.cluster, plan_digest=DIGEST, nodes=list(nodes), etcd_joins=joins,
                     rejoin=rejoin)


@pytest.mark.parametrize("nodes, joins, expect", [
    # accepted: an etcd-only node named for its one cluster; a member of two named for both;
    # workers beside them; a worker that is an etcd member, named for its cluster
    (("e2",), [ej("e2")], ""),
    (("v2",), [ej("v2"), ej("v2", "etcd-events")], ""),
    (("e2", "w1"), [ej("e2")], ""),
    (("w1",), None, ""),
    (("w1",), [], ""),
    (("wx",), [ej("wx", "etcd-events")], ""),
    # masters are still refused, etcd joins or not (a control-plane scale-out is not a join)
    (("m1",), None, "nodes: control-plane nodes (they join with a control-plane scale-out"),
    (("m1", "e2"), [ej("e2")], "nodes: control-plane nodes"),
    # an etcd member the request does not name: refused by name and cluster
    (("e2",), None, "nodes: etcd members without an etcdJoins entry (the caller adds each as a learner first "
                    "and names it there): e2 (etcd-data)"),
    (("v2",), [ej("v2")], "nodes: etcd members without an etcdJoins entry (the caller adds each as a learner "
                          "first and names it there): v2 (etcd-events)"),
    (("e2", "wx"), [ej("e2")], "nodes: etcd members without an etcdJoins entry (the caller adds each as a learner "
                               "first and names it there): wx (etcd-events)"),
    # an entry for a node that is not joined here
    (("e2",), [ej("e2"), ej("v2")], "etcdJoins: not among the nodes of this join: v2"),
    (("w1",), [ej("e1")], "etcdJoins: not among the nodes of this join: e1"),
    # the wrong etcd cluster, or a node that is no etcd member
    (("e2",), [ej("e2", "etcd-events")], "etcdJoins: not a member of that etcd cluster in the stored plan: "
                                         "e2 in etcd-events (a member of etcd-data)"),
    (("e2", "w1"), [ej("e2"), ej("w1")], "etcdJoins: not a member of that etcd cluster in the stored plan: "
                                         "w1 in etcd-data (a member of no etcd cluster)"),
    # the same start twice
    (("e2",), [ej("e2"), ej("e2")], "etcdJoins: named twice: e2 (etcd-data)"),
])
def test_etcd_join_gate(nodes, joins, expect):
    why = join_refusal(req(nodes, joins), PLAN, DIGEST, "Succeeded")
    assert why == expect if not expect else why.startswith(expect), why


@pytest.mark.parametrize("joins, running, expect", [
    # v2 ran etcd-data's member already and joins etcd-events: its start there only
    ([ej("v2", "etcd-events")], {"v2": ["etcd-data"]}, ""),
    # a start in the cluster it runs a member of already: refused, naming it
    ([ej("v2"), ej("v2", "etcd-events")], {"v2": ["etcd-data"]},
     "etcdJoins: a member of that etcd cluster already (rejoin.running names it): v2 in etcd-data"),
    # what it runs does not excuse a missing start in the cluster it joins
    ([], {"v2": ["etcd-data"]}, "nodes: etcd members without an etcdJoins entry (the caller adds each as a learner "
                                "first and names it there): v2 (etcd-events)"),
])
def test_a_member_joining_a_second_etcd_cluster_starts_only_there(joins, running, expect):
    why = join_refusal(req(("v2",), joins, running), PLAN, DIGEST, "Succeeded")
    assert why == expect if not expect else why.startswith(expect), why


def test_the_other_gates_still_come_first_and_after():
    # the stored plan must be the one that names the new node; the install must have succeeded
    assert join_refusal(req(("e9",), None), PLAN, DIGEST, "Succeeded").startswith("nodes: not in the stored plan")
    assert join_refusal(req(("e2",), [ej("e2")]), PLAN, "0" * 64, "Succeeded").startswith("planDigest:")
    assert join_refusal(req(("e2",), [ej("e2")]), PLAN, DIGEST, "Running").startswith("the install of")


def test_an_etcd_only_node_runs_node_env_certs_etcd_health_and_is_not_labelled():
    phases = {h: [p.slug for p in ps] for h, ps in phases_of(PLAN, ["e2", "v2", "wx", "w1"]).items()}
    assert phases == {"e2": ["node-env", "certs", "etcd", "health"], "v2": ["node-env", "certs", "etcd", "health"],
                      "wx": ["node-env", "certs", "etcd", "workers", "health"],
                      "w1": ["node-env", "certs", "workers", "health"]}
    # the etcd phase starts the member and waits for its /health (a learner answers it: phases_of)
    etcd = next(p for p in phases_of(PLAN, ["v2"])["v2"] if p.slug == "etcd")
    assert etcd.build is not None
    from bke_dispatcher.phases import NodeInputs
    steps = etcd.build(PLAN, PLAN.node("v2"), NodeInputs(render=[], certs=[], checksums={}))
    assert [s.id for s in steps] == ["health:etcd-data", "health:etcd-events"]
    assert not PLAN.node("e2").registers  # the adapter's labels skip nodes that register no Node (joins._label)


def test_the_record_keeps_the_etcd_joins_and_the_render_request_carries_them():
    j = new_join(req(("e2", "w1"), [ej("e2")]), PLAN, "t0")
    assert j.etcd_joins == [EtcdJoinRecord("etcd-data", "e2", ej("e2").initial_cluster)]
    doc = json.loads(j.to_json())
    assert doc[SCHEMA_FIELD] == record_kind("join").current and doc["etcd_joins"][0]["member"] == "e2"
    assert Join.from_json(j.to_json()) == j
    assert next_step(j, frozenset(), datetime(2026, 6, 1, tzinfo=timezone.utc)).action == "ask"
    msg = RenderManifests(request_id=j.slug, cluster=j.cluster, etcd_joins=[e.message() for e in j.etcd_joins])
    back = RenderManifests.model_validate_json(msg.to_bytes())
    assert back.etcd_joins == [ej("e2")]
    assert b"etcdJoins" in msg.to_bytes() and b"initialCluster" in msg.to_bytes()
    # a render request without joins (a retry, a workers-only join) keeps its previous body
    assert json.loads(RenderManifests(request_id="r", cluster="c").to_bytes()) == {"requestId": "r", "cluster": "c"}


# A join record as version 1 wrote it (before etcd-only nodes joined): a worker's join mid-way
# (tests/fixtures/state/join-v1/seed.json, which names the commit that wrote the form).
FIXTURE = Path(__file__).parents[2] / "fixtures" / "state" / "join-v1" / "seed.json"
V1 = next(e["value"] for e in json.loads(FIXTURE.read_text())["keys"] if e["key"] == "bke:seed:join")


def test_a_version_1_record_is_read_as_is_and_converts_by_adding_no_etcd_joins():
    old = Join.from_json(V1)  # readable from 1: the forms differ only by the new field
    assert old.etcd_joins == [] and old.nodes[0].index == 1 and old.cluster == "seed"
    kind = record_kind("join")
    record = {"join": V1}
    new, chain = convert(kind, record, 1, CONVERTERS)
    assert [c.from_version for c in chain] == [1, 2, 3] and header_version(kind, new) == 4  # 2 -> 3: agents_since, 3 -> 4: held_ports
    assert json.loads(new["join"])["etcd_joins"] == []
    assert [w.member for w in writes(record, new)] == ["join"]  # one SET, the results untouched
    assert Join.from_json(new["join"]) == old
    assert convert(kind, new, 4, CONVERTERS) == (new, ())
    for c in chain:  # idempotent (bke.adapters.state.conversion)
        assert c.fn(c.fn(record)) == c.fn(record)
