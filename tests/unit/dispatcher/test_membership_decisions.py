"""Workers joining and leaving, the pure decisions (no Redis, no bus): the gates (workers only,
the swapped-in plan, one operation per cluster), which install phases a new worker runs, the
order of a join (inputs, agents, one phase after another per node, labels) and of a removal
(drain, delete the Node, reset, forget), and records that resume where they were."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from pydantic import ValidationError

from bke.contracts.membership import JoinNodes, RemoveNodes
from bke.core.operation import Answers, Fail, ServiceAnswer, Wait
from bke.core.plan import plan_spec_text
from bke.adapters.state.plans import plan_digest
from bke_dispatcher.command_ids import parse_command_id
from bke_dispatcher.ops.join.decide import Join, apply_result, join_refusal, new_join, next_step, node_phases
from bke_dispatcher.ops.removal.decide import Removal, new_removal, next_step as removal_next, removal_refusal
from bke_dispatcher.ops.removal import decide as rm

SEED_TEXT = open("examples/seed-3m1w.yaml").read()
EXTRA = """
---
apiVersion: bke.bocloud.com/v1beta1
kind: BKENode
metadata: {name: seed-node2}
spec: {hostname: node2, ip: 127.0.10.5, role: [node]}
---
apiVersion: bke.bocloud.com/v1beta1
kind: BKENode
metadata: {name: seed-node3}
spec: {hostname: node3, ip: 127.0.10.6, role: [node]}
"""
SEED = plan_spec_text(SEED_TEXT).plan
BIGGER = plan_spec_text(SEED_TEXT + EXTRA).plan
DIGEST = plan_digest(BIGGER.model_dump_json())
NOW = datetime(2026, 6, 1, tzinfo=timezone.utc)


def join_req(*nodes: str, rid: str = "j1", digest: str = DIGEST) -> JoinNodes:
    return JoinNodes(request_id=rid, cluster="seed", plan_digest=digest, nodes=list(nodes or ("node2", "node3")))


def test_a_new_worker_runs_exactly_the_install_phases_that_target_workers():
    node2 = next(n for n in BIGGER.nodes if n.hostname == "node2")
    assert [p.slug for p in node_phases(BIGGER, node2)] == ["node-env", "certs", "workers", "health"]
    master = next(n for n in BIGGER.nodes if n.hostname == "master2")
    assert "etcd" in [p.slug for p in node_phases(BIGGER, master)]  # the table decides, not a list of our own


@pytest.mark.parametrize("kw, expect", [
    ({}, ""),
    ({"digest": "0" * 64}, "planDigest: the stored plan of seed is"),
    ({"nodes": ("node9",)}, "nodes: not in the stored plan of seed: node9"),
    ({"nodes": ("node2", "node2")}, "nodes: a node is named twice"),
    ({"nodes": ("master1", "node2")}, "nodes: control-plane nodes"),
    ({"paused": True}, "seed is paused"),
    ({"install": "Running"}, "the install of seed has not succeeded (Running)"),
    ({"install": None}, "the install of seed has not succeeded (none)"),
    ({"busy": "reset r9"}, "reset r9 of seed is running"),
    ({"plan": None}, "cluster seed has no plan"),
])
def test_join_gate(kw, expect):
    req = join_req(*kw.pop("nodes", ()), digest=kw.pop("digest", DIGEST))
    why = join_refusal(req, kw.pop("plan", BIGGER), DIGEST, kw.pop("install", "Succeeded"), **kw)
    assert why.startswith(expect) if expect else why == ""


def test_a_running_join_refuses_another_but_not_its_own_redelivery():
    cur = new_join(join_req(rid="old"), BIGGER, "t0")
    assert join_refusal(join_req(rid="new"), BIGGER, DIGEST, "Succeeded", current=cur).startswith("join old of seed is still running")
    assert join_refusal(join_req(rid="old"), BIGGER, DIGEST, "Succeeded", current=cur) == ""


def test_join_request_fields_are_checked_by_name():
    with pytest.raises(ValidationError) as err:
        JoinNodes.model_validate({"requestId": "a/b", "cluster": "seed", "planDigest": "xyz", "nodes": []})
    text = str(err.value)
    assert "requestId" in text and "planDigest" in text and "nodes" in text


def _answer(j: Join, status: str = "Succeeded", hosts=None, stderr: str = "") -> None:
    for n in j.nodes:
        if n.status == "Running" and (hosts is None or n.hostname in hosts):
            assert apply_result(j, n.command_id, status, "s1", stderr)


def _send(j: Join, hosts) -> None:
    """What the adapter does on `send`: each node's command for its current phase goes out."""
    from bke_dispatcher.ops.join.decide import command_of

    for n in j.nodes:
        if n.hostname in hosts:
            n.command_id, n.status = command_of(j, n), "Running"


def test_a_join_asks_its_inputs_waits_for_agents_then_runs_each_node_phase_by_phase():
    j = new_join(join_req(), BIGGER, "t0")
    assert next_step(j, frozenset(), NOW).action == "ask"
    j.asked = True
    assert next_step(j, frozenset(), NOW).reason.startswith("waiting for the rendered files and the certificates")
    j.render = j.certs = "Ready"
    d = next_step(j, frozenset({"node2"}), NOW)
    assert d.action == "wait" and "node3" in d.reason and "1/2 sealed" in d.reason
    sealed = frozenset({"node2", "node3"})
    seen: dict[str, list[str]] = {"node2": [], "node3": []}
    for _ in range(20):
        d = next_step(j, sealed, NOW)
        if d.action != "send":
            break
        _send(j, d.nodes)
        for n in j.nodes:
            if n.hostname in d.nodes:
                seen[n.hostname].append(n.command_id)
        _answer(j, hosts={"node2"})  # node2 runs ahead; node3 answers a round later
        if next_step(j, sealed, NOW).action == "wait":
            _answer(j)
    assert d.action == "label" and set(d.nodes) == {"node2", "node3"}
    for cids in seen.values():  # fixed ids, one per phase, only to the new nodes
        assert [parse_command_id(c)[3] for c in cids] == [0, 1, 2, 3]
        assert {parse_command_id(c)[1] for c in cids} == {"join@j1"}
    j.labelled = True
    assert next_step(j, sealed, NOW).action == "succeed"


def test_a_failed_input_or_node_fails_the_join_with_its_reason():
    j = new_join(join_req(), BIGGER, "t0")
    j.asked, j.render, j.input_reason = True, "Failed", "renderer: flag refused"
    assert next_step(j, frozenset(), NOW).reason == "renderer: flag refused"
    j = new_join(join_req(), BIGGER, "t0")
    j.asked, j.render, j.certs = True, "Ready", "Ready"
    sealed = frozenset({"node2", "node3"})
    _send(j, next_step(j, sealed, NOW).nodes)
    _answer(j, "Failed", hosts={"node3"}, stderr="no space left")
    d = next_step(j, sealed, NOW)
    assert d.action == "fail" and d.reason.startswith("node node3 phase node-env step s1: no space left")


T0 = NOW.isoformat()


@pytest.mark.parametrize(("since", "sealed", "waited_s", "action", "records", "says"), [
    # the first wait for the agents starts the clock: the decision carries `now` to record
    ("", {"node2"}, 0, "wait", T0, ["node3 to register", "1/2 sealed", "900 s left"]),
    # a wait already started keeps its start (nothing new to record)
    (T0, set(), 899, "wait", "", ["node2, node3 to register", "0/2 sealed", "1 s left"]),
    # at the deadline: fail, naming every node whose agent never registered, and how to provision it
    (T0, {"node2"}, 900, "fail", "", ["the agents of node3 never registered within 900 s",
                                      "bke agent provision", "--cluster seed --node NODE"]),
    (T0, set(), 3600, "fail", "", ["the agents of node2, node3 never registered"]),
    # every agent registered in time (even late in the window): no wait, no failure
    (T0, {"node2", "node3"}, 899, "send", "", []),
    (T0, {"node2", "node3"}, 5000, "send", "", []),  # sealed: the deadline no longer applies
])
def test_the_agents_have_a_deadline_measured_from_when_the_join_began_to_wait(since, sealed, waited_s, action,
                                                                               records, says):
    j = new_join(join_req(), BIGGER, "t0")
    j.asked, j.render, j.certs, j.agents_since = True, "Ready", "Ready", since
    d = next_step(j, frozenset(sealed), NOW + timedelta(seconds=waited_s), 900.0)
    assert d.action == action and (d.since if isinstance(d, Wait) else "") == records
    for words in says:
        assert words in d.reason
    if action == "fail":
        assert set(d.nodes) == {"node2", "node3"} - set(sealed)


def test_the_agents_clock_does_not_start_before_the_inputs_are_ready():
    j = new_join(join_req(), BIGGER, "t0")
    j.asked = True  # render and certs still pending: an hour of it does not count against the agents
    d = next_step(j, frozenset(), NOW + timedelta(hours=1), 900.0)
    assert d.action == "wait" and d.since == "" and "rendered files" in d.reason


def test_a_duplicate_or_stale_answer_counts_once_and_the_record_round_trips():
    j = new_join(join_req(), BIGGER, "t0")
    j.asked, j.render, j.certs = True, "Ready", "Ready"
    _send(j, ("node2",))
    cid = j.nodes[0].command_id
    assert apply_result(j, cid, "Succeeded", "", "")
    assert not apply_result(j, cid, "Succeeded", "", "")  # redelivered
    assert not apply_result(j, "seed/join@other/node2/0", "Succeeded", "", "")
    again = Join.from_json(j.to_json())
    assert again == j and again.nodes[0].stage == "certs"



def test_the_services_answers_fold_in_once_and_one_for_another_plan_fails_the_join():
    from bke_dispatcher.ops.join.decide import fold_answers, fold_input

    j = new_join(join_req(), BIGGER, "t0")
    answers = Answers({}, {"render": ServiceAnswer("join@j1", "Ready", DIGEST),
                           "certs": ServiceAnswer("join@old", "Ready", DIGEST)})  # an earlier join's
    assert fold_answers(j, answers) and (j.render, j.certs) == ("Ready", "Pending")
    assert not fold_answers(j, answers)  # the same answer again changes nothing
    assert fold_input(j, "certs", ServiceAnswer("join@j1", "Ready", "f" * 64))
    assert j.certs == "Failed" and j.input_reason.startswith("certs: the stored plan changed during the join (ffffffffffff")
    j.asked = True
    assert next_step(j, frozenset(), NOW) == Fail(j.input_reason)

def test_removal_gate_refuses_etcd_members_and_masters_by_name():
    assert removal_refusal(RemoveNodes(request_id="r1", cluster="seed", nodes=["node1"]), SEED, "Succeeded") == ""
    why = removal_refusal(RemoveNodes(request_id="r1", cluster="seed", nodes=["node1", "master2", "master3"]), SEED, "Succeeded")
    assert why.startswith("nodes: only workers") and "master2 (etcd member of etcd-data)" in why and "master3" in why
    why = removal_refusal(RemoveNodes(request_id="r1", cluster="seed", nodes=["gone"]), SEED, "Succeeded")
    assert "not in the stored plan of seed: gone" in why
    assert removal_refusal(RemoveNodes(request_id="r1", cluster="seed", nodes=["node1"]), SEED, "Running").startswith("the install")
    assert removal_refusal(RemoveNodes(request_id="r1", cluster="seed", nodes=["node1"]), SEED, "Succeeded",
                           busy="join j1").startswith("join j1 of seed is running")


def test_a_removal_goes_drain_delete_reset_forget_and_waits_for_the_resets():
    r = new_removal(RemoveNodes(request_id="r1", cluster="seed", nodes=["node2", "node3"]), "t0", ["a2", "a3"])
    order = []
    for _ in range(10):
        d = removal_next(r)
        order.append(d.action)
        if d.action in ("drain", "delete-node", "forget"):
            rm.advance(r, d.nodes)
        elif d.action == "reset":
            assert set(d.nodes) == {"node2", "node3"}
            for n in r.nodes:
                n.status = "Running"
            assert removal_next(r).action == "wait"
            assert rm.apply_result(r, r.nodes[0].command_id, "Succeeded", "", "")
            assert not rm.apply_result(r, r.nodes[0].command_id, "Succeeded", "", "")  # counted once
            assert removal_next(r).action == "wait"  # node3's reset is still running
            assert rm.apply_result(r, r.nodes[1].command_id, "Succeeded", "", "")
        else:
            break
    assert order == ["drain", "delete-node", "reset", "forget", "succeed"]
    assert Removal.from_json(r.to_json()) == r


def test_a_failed_stage_fails_the_removal_naming_node_and_stage():
    r = new_removal(RemoveNodes(request_id="r1", cluster="seed", nodes=["node1"]), "t0", ["a1"])
    rm.fail_stage(r, ("node1",), "drain not done within 600s: default/web-0")
    d = removal_next(r)
    assert d.action == "fail" and d.reason == "node node1 drain: drain not done within 600s: default/web-0"


def test_a_request_part_of_an_apply_is_judged_on_who_holds_the_slot_not_on_its_description() -> None:
    """`Gates.within` compares the holder as data (kind and request id): only the apply run the
    request names lets it in; the same id under another kind, or another apply, refuses it."""
    from bke_dispatcher.ops.membership.gates import Busy, Gates

    gates = Gates(plan=None, install="Succeeded", busy=Busy("apply", "a1"), paused=False)
    inside, why = gates.within("seed", "a1")
    assert why == "" and inside.busy is None and inside.busy_text == ""
    for holder in (Busy("upgrade", "a1"), Busy("apply", "a2"), None):
        g = Gates(plan=None, install="Succeeded", busy=holder, paused=False)
        out, why = g.within("seed", "a1")
        assert out is g and why == (f"partOf: apply a1 does not hold the operation slot of seed "
                                    f"({holder or 'nothing'} does)")
    assert gates.within("seed", None) == (gates, "")  # no partOf: the gates as read


def test_a_node_joining_again_keeps_the_ports_its_running_parts_hold_out_of_its_preflight():
    """node1, a worker, becomes a master (bke apply: apply_run._rejoin): JoinNodes names it in
    `rejoin` with what it runs now; its preflight checks the control plane's ports free, not
    its own kubelet's (a running kubelet holds 10250, which a new node's preflight refuses)."""
    from bke.contracts.agent_steps import CheckHost
    from bke.contracts.membership import MembershipRejoin
    from bke_dispatcher.ops.join.decide import JOIN_VERSION
    from bke_dispatcher.phases import NodeInputs, phase_by_slug

    promoted = plan_spec_text(SEED_TEXT.replace("role: [node]}", "role: [master/node]}")).plan
    digest = plan_digest(promoted.model_dump_json())
    node1 = SEED.node("node1")
    req = JoinNodes(request_id="j9", cluster="seed", plan_digest=digest, nodes=["node1"], part_of="a1",
                    rejoin=[MembershipRejoin(hostname="node1", running=list(node1.components))])
    assert join_refusal(req, promoted, digest, "Succeeded") == ""
    j = new_join(req, promoted, NOW.isoformat())
    assert j.held_ports == {"node1": [10250]} and JOIN_VERSION == 4
    assert [r.phases for r in j.nodes] == [["node-env", "certs", "control-plane-join", "health"]]
    assert Join.from_json(j.to_json()) == j  # kept in the record: a restarted dispatcher checks the same ports

    class AnySum(dict):  # every binary's checksum: the preflight is what is looked at here
        def __missing__(self, url: str) -> str:
            return "0" * 64

    def preflight(held: tuple[int, ...]) -> list[int]:
        steps = phase_by_slug("node-env").build(promoted, promoted.node("node1"),  # type: ignore[misc]
                                                NodeInputs(render=[], certs=[], checksums=AnySum(), held_ports=held))
        return next(s for s in steps if isinstance(s, CheckHost)).ports

    assert preflight(tuple(j.held_ports["node1"])) == [6443, 10257, 10259]
    assert preflight(()) == [6443, 10250, 10257, 10259]  # a new node's: every port it will listen on
    # a rejoin that names a node outside the join, or one that would lose a part, is refused by name
    bad = req.model_copy(update={"rejoin": [MembershipRejoin(hostname="node2", running=["kubelet"])]})
    assert join_refusal(bad, promoted, digest, "Succeeded").startswith("rejoin: not among the nodes of this join: node2")
    losing = req.model_copy(update={"rejoin": [MembershipRejoin(hostname="node1", running=["kubelet", "etcd-data"])]})
    assert "node1 (etcd-data)" in join_refusal(losing, promoted, digest, "Succeeded")


def test_the_contract_s_components_are_the_plan_s():
    import typing

    from bke.contracts.membership import Component
    from bke.core.plan.models import COMPONENTS

    assert typing.get_args(Component) == COMPONENTS
