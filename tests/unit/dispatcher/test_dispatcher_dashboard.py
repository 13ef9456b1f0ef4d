"""The dashboard's pure core and pages: query parsing naming the field, filtering and paging in
plan order, the phase timeline, the bounded event list fed by what the dispatcher publishes,
and every shown value escaped."""
from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta, timezone

import pytest

from bke.contracts.status import ClusterStatus, NodeCounts, StatusPhase
from bke_dispatcher.dashboard import pages
from bke_dispatcher.dashboard.events import RecentEvents
from bke_dispatcher.dashboard.view import (
    BadQuery,
    ClusterView,
    NodePage,
    NodeQuery,
    NodeRow,
    cell_state,
    parse_query,
    timeline,
)

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)


def at(s: float) -> str:
    return (T0 + timedelta(seconds=s)).isoformat()


@pytest.mark.parametrize("params,field", [
    ({"state": "Broken"}, "state"), ({"offset": "-1"}, "offset"), ({"offset": "x"}, "offset"),
    ({"limit": "0"}, "limit"), ({"limit": "1001"}, "limit"),
])
def test_a_bad_query_names_its_field(params, field):
    with pytest.raises(BadQuery) as err:
        parse_query(params)
    assert err.value.field == field and str(err.value).startswith(f"{field}: ")


def test_query_defaults_and_values():
    assert parse_query({}) == NodeQuery(None, 0, 200)
    assert parse_query({"state": "Failed", "offset": "400", "limit": "50"}) == NodeQuery("Failed", 400, 50)


def test_node_page_offsets():
    rows = [NodeRow(f"n{i}", "Pending", "", "", {}) for i in range(10)]
    last = NodePage(NodeQuery(None, 990, 200), {"Pending": 1000}, 1000, [], rows, [])
    assert last.next_offset is None and last.prev_offset == 790
    first = NodePage(NodeQuery(None, 0, 10), {"Pending": 1000}, 1000, [], rows, [])
    assert first.next_offset == 10 and first.prev_offset is None


def test_cell_state():
    assert cell_state(None) == "" and cell_state({"status": "Sent"}) == "Running"
    assert cell_state({"status": "Failed"}) == "Failed" and cell_state({"status": "Retry"}) == "Retry"


def test_timeline_durations_and_offsets():
    phases = [StatusPhase(name="a", summary="s", status="Succeeded", started_at=at(0), finished_at=at(10)),
              StatusPhase(name="b", summary="s", status="Running", started_at=at(10), finished_at=None),
              StatusPhase(name="c", summary="s", status="Pending")]
    rows = timeline(phases, T0 + timedelta(seconds=25))
    assert [(r.duration_s, r.offset_s) for r in rows] == [(10.0, 0.0), (15.0, 10.0), (None, None)]


def test_recent_events_keep_the_transitions_bounded_newest_first():
    ev = RecentEvents(per_cluster=3, clusters=2)
    for i in range(5):
        ev.record("bke.v1.install.c1.phase", json.dumps({"at": at(i), "phase": f"p{i}", "status": "Running"}).encode())
    ev.record("bke.v1.install.c1.node", json.dumps({"at": at(9), "node": "n", "phase": "p", "status": "Succeeded"}).encode())
    assert [e.phase for e in ev.latest("c1")] == ["p4", "p3", "p2"]  # a node that succeeded is not news
    ev.record("bke.v1.install.c1.node", json.dumps({"at": at(9), "node": "n1", "phase": "p", "status": "Failed",
                                                    "step": "s", "stderr": "x" * 2000}).encode())
    failed = ev.latest("c1")[0]
    assert (failed.kind, failed.node, failed.step, len(failed.message)) == ("node", "n1", "s", 500)
    ev.record("bke.v1.agent.c1.n1.command", b"{}")  # not an install subject: ignored
    ev.record("bke.v1.install.c1.phase", b"not json")
    assert len(ev.latest("c1")) == 3
    ev.record("bke.v1.install.c2.finished", json.dumps({"at": at(1), "status": "Succeeded"}).encode())
    ev.record("bke.v1.install.c3.finished", json.dumps({"at": at(1), "status": "Failed"}).encode())
    assert ev.latest("c1") == [] and ev.latest("c3")[0].status == "Failed"  # the oldest cluster went first


def test_watch_records_only_what_was_published():
    ev = RecentEvents()
    sent = []

    async def publish(data, subject, headers=None):
        if b"boom" in data:
            raise ConnectionError("bus away")
        sent.append(subject)

    watched = ev.watch(publish)
    body = json.dumps({"at": at(0), "phase": "etcd", "status": "Running"}).encode()
    asyncio.run(watched(body, "bke.v1.install.c.phase", {}))
    with pytest.raises(ConnectionError):
        asyncio.run(watched(b'{"boom": 1}', "bke.v1.install.c.finished", {}))
    assert sent == ["bke.v1.install.c.phase"] and [e.phase for e in ev.latest("c")] == ["etcd"]


def test_pages_escape_every_value():
    evil = '<script>alert("x")</script>'
    status = ClusterStatus(cluster="c1", status="Failed", request_id=evil, message=evil, node_counts=NodeCounts(total=1),
                           node_selection="none", nodes=[], nodes_matched=0,
                           phases=[StatusPhase(name="node-env", summary=evil, status="Failed", message=evil,
                                               started_at=at(0), finished_at=at(1))])
    rows = [NodeRow(hostname=evil, status="Failed", phase="node-env", step=evil, cells={"node-env": "Failed"})]
    ev = RecentEvents()
    ev.record("bke.v1.install.c1.node", json.dumps({"at": at(1), "node": evil, "phase": "node-env", "status": "Failed",
                                                    "step": evil, "stderr": evil}).encode())
    view = ClusterView(status=status, phases=timeline(status.phases, T0),
                       nodes=NodePage(NodeQuery(), {"Failed": 1}, 1, ["node-env"], rows, [evil]), events=ev.latest("c1"))
    for html_text in (pages.cluster_page(view), pages.clusters_page([status]), pages.message_page(evil, evil)):
        assert evil not in html_text and "&lt;script&gt;" in html_text
    page = pages.cluster_page(view)
    assert page.count("<script>") == 1  # only the page's own poller
    assert '"/clusters/c1/live"' in page and "%3Cscript%3E" in page  # the node's link, quoted


def test_the_live_script_keeps_every_query_parameter():
    url = pages.cluster_url("c1", NodeQuery("Failed", 200, 50), live=True)
    assert url == "/clusters/c1/live?state=Failed&offset=200&limit=50"
    script = pages._live_script(url, "live", 2.0)
    assert "\\u0026offset=200" in script and "&amp;" not in script


def test_a_lost_state_is_a_503_saying_so_never_an_empty_page():
    import httpx
    from redis.asyncio import Redis
    from starlette.applications import Starlette

    from bke.core.errors import TemporaryError
    from bke_dispatcher.dashboard import DashboardReader, dashboard_routes

    class Unused:  # the guard answers before any read
        r = Redis.from_url("redis://127.0.0.1:1")  # never connected

    def lost() -> None:
        raise TemporaryError("the state was lost: waiting for a restore")

    reader = DashboardReader(Unused(), Unused(), Unused(), RecentEvents(), lambda: T0, guard=lost)  # type: ignore[arg-type]
    app = Starlette(routes=dashboard_routes(reader))

    async def ask() -> tuple[httpx.Response, ...]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://dash") as client:
            return (await client.get("/clusters/c1"), await client.get("/api/clusters/c1"),
                    await client.get("/api/clusters/c1", params={"offset": "-5"}))

    page, doc, bad = asyncio.run(ask())
    assert page.status_code == 503 and "the state was lost" in page.text
    assert doc.status_code == 503 and doc.json()["error"] == "Unavailable"
    assert bad.status_code == 400 and bad.json()["field"] == "offset"


@pytest.mark.parametrize("component,cells,health,want", [
    ("containerd", {"node-env": "Succeeded"}, {"status": "Healthy", "failing": []}, "Succeeded"),  # no check of its own
    ("kubelet", {"node-env": "Succeeded", "workers": "Failed"}, None, "Failed"),  # its installing command failed
    ("kubelet", {"workers": "Succeeded"}, {"status": "Healthy", "failing": []}, "Healthy"),
    ("etcd-events", {"etcd": "Succeeded"}, {"status": "Unhealthy", "failing": ["health:etcd-events"]}, "Unhealthy"),
    ("kube-apiserver", {"control-plane-join": "Running"}, {"status": "Healthy", "failing": []}, "Running"),
    ("kube-proxy", {}, {"status": "Healthy", "failing": []}, ""),  # a DaemonSet: no per-node command, no check
    ("kube-scheduler", {}, None, ""),
])
def test_component_cell(component, cells, health, want):
    from bke_dispatcher.dashboard.view import component_cell

    assert component_cell(component, cells, health) == want
