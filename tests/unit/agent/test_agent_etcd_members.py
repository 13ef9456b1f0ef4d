"""The membership steps' decisions against etcd's answers (bke_agent.backends.etcd_members).

The member API is a small in-memory stand-in of etcd's gateway answers (the shapes and messages
of etcd 3.5, which tests/integration/test_etcd_members.py checks against the real 3.5.1); it
lets the rare answers be forced: a peer URL taken by another member, a second learner, a removal
racing another, the deadline of a promote on an injected clock."""
from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from bke.contracts.agent_steps import EtcdMemberAdd, EtcdMemberPromote, EtcdMemberRemove
from bke_agent.backends.etcd_members import ensure_member
from bke_agent.errors import PermanentStepError, StepError

URL = "https://10.0.0.21:2379"
COMMON: dict[str, Any] = {"endpoint": URL, "etcd_cluster": "etcd-data"}


class FakeEtcd:
    """Members by id; `refuse[path]`: (status, message) answers given before the real one."""

    def __init__(self, members: list[dict[str, Any]], asked: str = "1") -> None:
        self.members = {m["ID"]: m for m in members}
        self.asked = asked
        self.refuse: dict[str, list[tuple[int, str]]] = {}
        self.calls: list[str] = []
        self.next_id = 100

    def _answer(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        self.calls.append(path)
        body = json.loads(request.content or b"{}")
        if self.refuse.get(path):
            status, message = self.refuse[path].pop(0)
            return httpx.Response(status, json={"error": message, "code": 9, "message": message})
        listing = {"members": list(self.members.values())}
        if path == "/v3/cluster/member/list":
            return httpx.Response(200, json=listing)
        if path == "/v3/maintenance/status":
            return httpx.Response(200, json={"header": {"member_id": self.asked}})
        if path == "/v3/cluster/member/add":
            self.next_id += 1
            m = {"ID": str(self.next_id), "peerURLs": body["peerURLs"], "isLearner": body.get("isLearner", False)}
            self.members[m["ID"]] = m
            return httpx.Response(200, json={"member": m, "members": list(self.members.values())})
        if path == "/v3/cluster/member/promote":
            self.members[body["ID"]]["isLearner"] = False
            return httpx.Response(200, json=listing)
        if path == "/v3/cluster/member/remove":
            if body["ID"] not in self.members:
                return httpx.Response(404, json={"message": "etcdserver: member not found"})
            del self.members[body["ID"]]
            return httpx.Response(200, json={"members": list(self.members.values())})
        return httpx.Response(404, json={"message": "no such path"})

    @property
    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self._answer)


def e1() -> dict[str, Any]:
    return {"ID": "1", "name": "e1", "peerURLs": ["https://10.0.0.21:2380"]}


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    async def sleep(self, s: float) -> None:
        self.t += s


async def test_add_refuses_a_peer_url_of_another_member() -> None:
    etcd = FakeEtcd([e1()])
    step = EtcdMemberAdd(id="a", member="e2", peer_url="https://10.0.0.21:2380", **COMMON)
    with pytest.raises(PermanentStepError, match="belongs to member e1"):
        await ensure_member(step, URL, False, transport=etcd.transport)
    assert "/v3/cluster/member/add" not in etcd.calls


async def test_add_refuses_a_member_listed_under_another_url() -> None:
    etcd = FakeEtcd([e1(), {"ID": "2", "name": "e2", "peerURLs": ["https://10.0.0.99:2380"]}])
    step = EtcdMemberAdd(id="a", member="e2", peer_url="https://10.0.0.22:2380", **COMMON)
    with pytest.raises(PermanentStepError, match="remove it first"):
        await ensure_member(step, URL, False, transport=etcd.transport)


async def test_add_asks_again_while_the_cluster_is_unhealthy_then_adds_a_learner() -> None:
    etcd = FakeEtcd([e1()])
    etcd.refuse["/v3/cluster/member/add"] = [(503, "etcdserver: unhealthy cluster")] * 3
    clock = Clock()
    step = EtcdMemberAdd(id="a", member="e2", peer_url="https://10.0.0.22:2380", poll_s=1, **COMMON)
    out = await ensure_member(step, URL, False, transport=etcd.transport, sleep=clock.sleep, clock=clock)
    assert out.status == "Succeeded" and "added e2 as a learner" in str(out.stdout) and clock.t == 3
    [new] = [m for m in etcd.members.values() if m["ID"] != "1"]
    assert new["isLearner"] is True and new["peerURLs"] == ["https://10.0.0.22:2380"]


async def test_a_second_learner_is_refused_naming_the_first() -> None:
    etcd = FakeEtcd([e1(), {"ID": "7", "name": "", "peerURLs": ["https://10.0.0.23:2380"], "isLearner": True}])
    etcd.refuse["/v3/cluster/member/add"] = [(400, "etcdserver: too many learner members in cluster")]
    step = EtcdMemberAdd(id="a", member="e2", peer_url="https://10.0.0.22:2380", **COMMON)
    with pytest.raises(StepError, match=r"one learner at a time and \(not started\) id=7 learner https://10.0.0.23"):
        await ensure_member(step, URL, False, transport=etcd.transport)


async def test_promote_gives_up_at_its_deadline_with_etcds_answer() -> None:
    etcd = FakeEtcd([e1(), {"ID": "7", "name": "", "peerURLs": ["https://10.0.0.22:2380"], "isLearner": True}])
    msg = "etcdserver: can only promote a learner member which is in sync with leader"
    etcd.refuse["/v3/cluster/member/promote"] = [(400, msg)] * 100
    clock = Clock()
    step = EtcdMemberPromote(id="p", member="e2", peer_url="https://10.0.0.22:2380", timeout_s=10, poll_s=2, **COMMON)
    with pytest.raises(StepError) as err:
        await ensure_member(step, URL, False, transport=etcd.transport, sleep=clock.sleep, clock=clock)
    text = str(err.value)
    assert "not accepted within 10s (6 requests)" in text and msg in text and "has never started" in text
    assert etcd.members["7"]["isLearner"] is True and clock.t == 10


async def test_promote_of_a_caught_up_learner_then_again() -> None:
    etcd = FakeEtcd([e1(), {"ID": "7", "name": "e2", "peerURLs": ["https://10.0.0.22:2380"], "isLearner": True}])
    etcd.refuse["/v3/cluster/member/promote"] = [(400, "etcdserver: can only promote a learner member which is in "
                                                       "sync with leader")]
    clock = Clock()
    step = EtcdMemberPromote(id="p", member="e2", peer_url="https://10.0.0.22:2380", **COMMON)
    out = await ensure_member(step, URL, False, transport=etcd.transport, sleep=clock.sleep, clock=clock)
    assert out.status == "Succeeded" and etcd.members["7"]["isLearner"] is False
    again = await ensure_member(step, URL, False, transport=etcd.transport, sleep=clock.sleep, clock=clock)
    assert again.status == "Skipped" and "already is a voting member" in str(again.stdout)


async def test_promote_of_a_stranger_is_permanent() -> None:
    step = EtcdMemberPromote(id="p", member="e9", peer_url="https://10.0.0.29:2380", **COMMON)
    with pytest.raises(PermanentStepError, match="add it as a learner first"):
        await ensure_member(step, URL, False, transport=FakeEtcd([e1()]).transport)


async def test_remove_by_name_a_racing_removal_and_an_absent_member() -> None:
    e3 = {"ID": "3", "name": "e3", "peerURLs": ["https://10.0.0.23:2380"]}
    etcd = FakeEtcd([e1(), e3])
    step = EtcdMemberRemove(id="r", member="e3", peer_url="https://10.0.0.99:2380", **COMMON)  # found by its name
    etcd.refuse["/v3/cluster/member/remove"] = [(404, "etcdserver: member not found")]  # removed by another meanwhile
    del_before = dict(etcd.members)
    out = await ensure_member(step, URL, False, transport=etcd.transport)
    # the racing answer is taken as done only once the list no longer shows it: here it still does,
    # so the step asked again and removed it
    assert "3" in del_before and "3" not in etcd.members and out.status == "Succeeded"
    assert (await ensure_member(step, URL, False, transport=etcd.transport)).status == "Skipped"


async def test_host_backend_runs_the_steps_on_the_given_url(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The host backend's wiring: the step's own URL (no loopback mapping), routed by type."""
    from bke_agent.backends import HostBackend

    etcd = FakeEtcd([e1()])
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url).split("/v3/")[0])
        return etcd._answer(request)

    host = HostBackend(tmp_path, http_transport=httpx.MockTransport(answer))
    add = EtcdMemberAdd(id="a", member="e2", peer_url="https://10.0.0.22:2380", **COMMON)
    out = await host.execute(add, lambda: b"")
    assert out.status == "Succeeded" and set(seen) == {URL}
    promote = EtcdMemberPromote(id="p", member="e2", peer_url="https://10.0.0.22:2380", **COMMON)
    assert (await host.execute(promote, lambda: b"")).status == "Succeeded"
    remove = EtcdMemberRemove(id="r", member="e2", peer_url="https://10.0.0.22:2380", **COMMON)
    assert (await host.execute(remove, lambda: b"")).status == "Succeeded"
    assert [m["ID"] for m in etcd.members.values()] == ["1"]


async def test_a_leader_change_is_asked_again() -> None:
    """Met in a lab right after an install: the first member list answered 'leader changed'."""
    etcd = FakeEtcd([e1(), {"ID": "3", "name": "e3", "peerURLs": ["https://10.0.0.23:2380"]}])
    etcd.refuse["/v3/cluster/member/list"] = [(503, "etcdserver: leader changed")]
    clock = Clock()
    step = EtcdMemberRemove(id="r", member="e3", peer_url="https://10.0.0.23:2380", **COMMON)
    out = await ensure_member(step, URL, False, transport=etcd.transport, sleep=clock.sleep, clock=clock)
    assert out.status == "Succeeded" and "3" not in etcd.members and clock.t == 1


async def test_a_member_that_never_answers_fails_at_the_deadline() -> None:
    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    clock = Clock()
    step = EtcdMemberAdd(id="a", member="e2", peer_url="https://10.0.0.22:2380", timeout_s=5, **COMMON)
    with pytest.raises(StepError, match=r"not accepted within 5s \(6 requests\).*no answer: ConnectError"):
        await ensure_member(step, URL, False, transport=httpx.MockTransport(down), sleep=clock.sleep, clock=clock)
