"""The membership sequence (bke.core.lifecycle.etcd_members): order, quorum refusals, the joins the
renderer gets, the agent steps, and the joining member's rendered flags."""
from __future__ import annotations

import pytest

from bke.contracts.agent_steps import EtcdMemberAdd, EtcdMemberPromote, EtcdMemberRemove
from bke.core.lifecycle.etcd_members import agent_step, etcd_joins, member_sequences
from bke.core.render import EtcdJoin, MissingInputError, RenderInputs, render_cluster

from tests.unit.core.render.test_render_support import flags, plan_of, pod, spec_text

MASTER = ("m1", "10.0.0.11", ["master"])


def _etcd(*hosts: str, role: str = "etcd") -> list[tuple[str, str, list[str]]]:
    return [(h, f"10.0.0.{20 + int(h[1:])}", [role]) for h in hosts]


def _plan(*hosts: str, role: str = "etcd"):  # type: ignore[no-untyped-def]
    return plan_of(spec_text([MASTER, *_etcd(*hosts, role=role)], endpoint=None))


def _short(seq) -> list[str]:  # type: ignore[no-untyped-def]
    return [f"{s.kind} {s.member}@{s.run_on}" for s in seq.steps]


CASES = [
    # (before, after, unhealthy, expected steps)
    ("grow 1 -> 3", ("e1",), ("e1", "e2", "e3"), (), [
        "add-learner e2@e1", "start-member e2@e2", "promote e2@e1", "check-health e2@e1",
        "add-learner e3@e1", "start-member e3@e3", "promote e3@e1", "check-health e3@e1"]),
    ("shrink 5 -> 3", ("e1", "e2", "e3", "e4", "e5"), ("e1", "e2", "e3"), (), [
        "remove-member e4@e1", "check-health e4@e1", "remove-member e5@e1", "check-health e5@e1"]),
    ("replace one: the add first", ("e1", "e2", "e3"), ("e1", "e2", "e4"), (), [
        "add-learner e4@e1", "start-member e4@e4", "promote e4@e1", "check-health e4@e1",
        "remove-member e3@e1", "check-health e3@e1"]),
    ("an unhealthy member goes first, and is never asked", ("e1", "e2", "e3", "e4", "e5"), ("e1", "e2", "e3"),
     ("e1", "e5"), ["remove-member e5@e2", "check-health e5@e2", "remove-member e4@e2", "check-health e4@e2"]),
]


@pytest.mark.parametrize("name,before,after,unhealthy,expected", CASES, ids=[c[0] for c in CASES])
def test_sequence_order(name: str, before: tuple[str, ...], after: tuple[str, ...], unhealthy: tuple[str, ...],
                        expected: list[str]) -> None:
    [seq] = member_sequences(_plan(*before), _plan(*after), frozenset(unhealthy))
    assert not seq.refusals
    assert _short(seq) == expected


def test_moving_the_only_member_is_refused_for_want_of_a_member_to_ask() -> None:
    """e1 -> e2: e1 goes and e2 is not there yet, so no staying member can add e2."""
    [seq] = member_sequences(_plan("e1"), _plan("e2"))
    assert seq.refusals and seq.refusals[0].name == "EtcdHealthyMember" and not seq.steps


REFUSED = [
    ("5 -> 3 with two staying members unhealthy", ("e1", "e2", "e3", "e4", "e5"), ("e1", "e2", "e3"), ("e1", "e2"),
     "EtcdQuorum"),
    ("3 -> 1 with the staying member unhealthy", ("e1", "e2", "e3"), ("e1",), ("e1",), "EtcdQuorum"),
    ("every member unhealthy", ("e1",), ("e1", "e2", "e3"), ("e1",), "EtcdHealthyMember"),
]


@pytest.mark.parametrize("name,before,after,unhealthy,rule", REFUSED, ids=[c[0] for c in REFUSED])
def test_refused(name: str, before: tuple[str, ...], after: tuple[str, ...], unhealthy: tuple[str, ...], rule: str) -> None:
    [seq] = member_sequences(_plan(*before), _plan(*after), frozenset(unhealthy))
    assert [r.name for r in seq.refusals] == [rule] and not seq.steps


def test_initial_cluster_of_each_join_is_the_members_then_plus_itself() -> None:
    before, after = _plan("e1", "e2", "e3"), _plan("e1", "e2", "e4", "e5", "e6")
    joins = etcd_joins(before, after)
    peer = {m.hostname: m.peer_url for c in after.etcd_clusters for m in c.members}
    peer.update({m.hostname: m.peer_url for c in before.etcd_clusters for m in c.members})
    # e3 is removed only after the adds, so it is still a member when e4 and e5 join
    assert joins == (
        EtcdJoin("etcd-data", "e4", ",".join(f"{h}={peer[h]}" for h in ("e1", "e2", "e3", "e4"))),
        EtcdJoin("etcd-data", "e5", ",".join(f"{h}={peer[h]}" for h in ("e1", "e2", "e3", "e4", "e5"))),
        EtcdJoin("etcd-data", "e6", ",".join(f"{h}={peer[h]}" for h in ("e1", "e2", "e3", "e4", "e5", "e6"))),
    )


def test_health_checks_leave_out_members_known_unhealthy() -> None:
    [seq] = member_sequences(_plan("e1", "e2", "e3"), _plan("e1", "e2", "e3", "e4", "e5"), frozenset({"e3"}))
    checks = [s.healthy for s in seq.steps if s.kind == "check-health"]
    assert checks == [("e1", "e2", "e4"), ("e1", "e2", "e4", "e5")]


def test_step_ids_fit_the_contract() -> None:
    from bke.core.lifecycle.etcd_members import MemberStep
    long = "n" * 60 + "." + "x" * 60 + ".example"
    step = agent_step(MemberStep("promote", "etcd-events", long, "e1", peer_url="https://10.0.0.9:2382"),
                      _plan("e1").etcd_clusters[0])
    assert step is not None and len(step.id) <= 128 and step.member == long


def test_no_change_no_sequence() -> None:
    assert member_sequences(_plan("e1", "e2", "e3"), _plan("e1", "e2", "e3")) == []


def test_agent_steps_ask_the_staying_member_on_its_client_url() -> None:
    before, after = _plan("e1", "e2", "e3"), _plan("e1", "e2", "e4")
    [seq] = member_sequences(before, after)
    cluster = after.etcd_cluster("etcd-data")
    old = before.etcd_cluster("etcd-data")
    assert cluster is not None and old is not None
    built = [agent_step(s, cluster) for s in seq.steps]
    assert built == [agent_step(s, old) for s in seq.steps]  # run_on stays: either plan gives the same step
    kinds = [type(b).__name__ if b is not None else None for b in built]
    assert kinds == ["EtcdMemberAdd", None, "EtcdMemberPromote", None, "EtcdMemberRemove", None]
    add, promote, remove = (b for b in built if b is not None)
    assert isinstance(add, EtcdMemberAdd) and isinstance(promote, EtcdMemberPromote)
    assert isinstance(remove, EtcdMemberRemove)
    e1 = cluster.member("e1")
    assert e1 is not None and add.endpoint == e1.client_url
    assert add.peer_url == cluster.member("e4").peer_url  # type: ignore[union-attr]
    assert add.tls is not None and add.tls.cert.endswith("/healthcheck-client.crt")
    assert remove.member == "e3" and remove.peer_url == old.member("e3").peer_url  # type: ignore[union-attr]


def test_joining_member_renders_existing_state_and_the_others_stay_as_installed() -> None:
    before, after = _plan("e1"), _plan("e1", "e2", "e3")
    joins = etcd_joins(before, after)
    plain = render_cluster(after, RenderInputs())
    joined = render_cluster(after, RenderInputs(etcd_joins=joins))
    for host, state, members in (("e1", "new", 3), ("e2", "existing", 2), ("e3", "existing", 3)):
        f = flags(pod(joined, host, "etcd.yaml"))
        assert f["initial-cluster-state"] == state, host
        assert len(f["initial-cluster"].split(",")) == members, host
    assert flags(pod(joined, "e2", "etcd.yaml"))["initial-cluster"].split(",")[-1].startswith("e2=")
    # nodes that do not join render exactly as without joins (the install's rendering is unchanged)
    for n in ("m1", "e1"):
        assert plain.node(n).files == joined.node(n).files


def test_a_join_that_does_not_list_the_member_is_refused() -> None:
    after = _plan("e1", "e2", "e3")
    bad = EtcdJoin("etcd-data", "e2", "e1=https://10.0.0.21:2380")
    with pytest.raises(MissingInputError, match="without itself"):
        render_cluster(after, RenderInputs(etcd_joins=(bad,)))


def test_apiservers_list_every_new_events_member() -> None:
    """Growing etcd-events: the apiservers' overrides (from the plan) name each new member."""
    def split(*events: str):  # type: ignore[no-untyped-def]
        nodes = [MASTER, ("d1", "10.0.0.21", ["etcd"]), *_etcd(*events, role="etcd-event")]
        return plan_of(spec_text(nodes, endpoint=None))
    before, after = split("v31"), split("v31", "v32", "v33")
    ev = after.etcd_cluster("etcd-events")
    assert ev is not None
    overrides = after.apiserver.etcd_servers_overrides
    for m in ev.members:
        assert m.client_url in overrides
    assert before.apiserver.etcd_servers_overrides.count("https://") == 2  # /events and leases, one member
    assert overrides.count("https://") == 6
    f = flags(pod(render_cluster(after, RenderInputs(etcd_joins=etcd_joins(before, after))), "m1", "kube-apiserver.yaml"))
    assert f["etcd-servers-overrides"] == overrides
