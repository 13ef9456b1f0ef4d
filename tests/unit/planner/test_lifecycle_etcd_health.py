"""The diff's quorum rule reads live etcd health per etcd cluster: `unhealthy_etcd_members` from
the dispatcher's status rows, `diff_plans` taking them per cluster, and the planner's paging
reader of the dispatcher's unhealthy nodes."""
from __future__ import annotations

import pytest

from bke.contracts.status import ClusterStatus, GetStatus, HealthCounts, NodeCounts, NodeHealth, StatusError, StatusNode
from bke.core.lifecycle.diff import diff_plans
from bke.core.lifecycle.etcd_health import unhealthy_etcd_members
from bke_planner.changes import EtcdHealth, changes_of
from bke_planner.diff_requests import etcd_health

from tests.unit.core.test_lifecycle_diff import SPLIT, plan, without


@pytest.fixture(scope="module")
def split():
    return plan(SPLIT)


def row(host: str, status: str = "Unhealthy", failing: tuple[str, ...] = ()) -> StatusNode:
    return StatusNode(hostname=host, status="Succeeded", health=NodeHealth(status=status, failing=list(failing)))


def test_members_count_against_the_etcd_cluster_whose_check_failed(split):
    names = [c.name for c in split.etcd_clusters]
    events = next(c for c in split.etcd_clusters if "events" in c.name)
    host = events.members[0].hostname
    rows = [row(host, failing=(f"health:{events.name}",)),
            row(events.members[1].hostname, failing=("health:kubelet",)),  # its member answered
            row(events.members[2].hostname, status="Healthy"),
            StatusNode(hostname="worker4", status="Succeeded")]  # no answer yet: not counted
    assert unhealthy_etcd_members(split, rows) == {events.name: frozenset({host})}
    assert set(names) >= {events.name}


def test_diff_quorum_rule_per_etcd_cluster(split):
    new = plan(without(without(SPLIT, "events2"), "events3"))
    events = next(c.name for c in split.etcd_clusters if "events" in c.name)
    pods = next(c.name for c in split.etcd_clusters if "pods" in c.name)
    # events1 sick in etcd-events: 3 -> 2 leaves 1 healthy of 2, refused
    refused = diff_plans(split, new, unhealthy_etcd_members={events: ["events1"]})
    assert [r.name for r in refused.refusals] == ["EtcdQuorum"]
    # the same host named under another etcd cluster does not count against etcd-events
    assert not diff_plans(split, new, unhealthy_etcd_members={pods: ["events1"]}).refused


def status_page(nodes: list[StatusNode], next_offset: int | None) -> bytes:
    return ClusterStatus(cluster="big", status="Succeeded", request_id="r", phases=[], node_counts=NodeCounts(),
                         node_selection="unhealthy", nodes=nodes, nodes_matched=len(nodes), next_offset=next_offset,
                         node_health=HealthCounts()).to_bytes()


async def test_the_planner_reads_every_page_of_unhealthy_nodes(split):
    events = next(c.name for c in split.etcd_clusters if "events" in c.name)
    asked: list[GetStatus] = []
    pages = {0: status_page([row("events1", failing=(f"health:{events}",))], 1),
             1: status_page([row("events2", failing=(f"health:{events}",))], None)}

    async def ask(payload: bytes) -> bytes:
        req = GetStatus.model_validate_json(payload)
        asked.append(req)
        return pages[req.offset]

    got = await etcd_health(ask, split)
    assert got == EtcdHealth({events: frozenset({"events1", "events2"})})
    assert [(a.nodes, a.offset) for a in asked] == [("unhealthy", 0), ("unhealthy", 1)]


@pytest.mark.parametrize("answer,words", [
    (TimeoutError(), "no answer on bke.v1.status.get: TimeoutError"),
    (StatusError(reason="NotFound", message="no such cluster").to_bytes(), "answered NotFound: no such cluster"),
    (b"{not json", "no answer on bke.v1.status.get"),
    (status_page([], 0), "pages do not move on"),
])
async def test_an_unknown_health_is_said_not_guessed(split, answer, words):
    async def ask(payload: bytes) -> bytes:
        if isinstance(answer, Exception):
            raise answer
        return answer

    got = await etcd_health(ask, split)
    assert got.unhealthy is None and words in got.message


def test_the_answer_says_whether_health_was_read(split):
    new = plan(without(without(SPLIT, "events2"), "events3"))
    checked = changes_of("r", new, split, "d0", EtcdHealth({}))
    assert checked.etcd_health == "checked" and checked.etcd_unhealthy == {}
    unknown = changes_of("r", new, split, "d0", EtcdHealth(None, "no answer"))
    assert unknown.etcd_health == "unknown" and unknown.etcd_health_message == "no answer"
