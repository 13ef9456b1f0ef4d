"""bke.adapters.upgrade.quorum: the verdict on one sample (table-driven), and the sampler's reading of
etcd's answers (/health, /v3/maintenance/status) through httpx's mock transport (no network)."""
from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from bke.adapters.upgrade.quorum import Dip, MemberEndpoints, MemberSample, QuorumSample, QuorumSampler, dips, majority, verdict


def _sample(*healthy: bool, at: float = 0.0, leaders: tuple[int, ...] = ()) -> QuorumSample:
    leaders = leaders or (0,) * len(healthy)
    return QuorumSample(at=at, members=tuple(MemberSample(f"m{i + 1}", ok, leader=lead, error="" if ok else "down")
                                             for i, (ok, lead) in enumerate(zip(healthy, leaders))))


@pytest.mark.parametrize(("size", "need"), [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (7, 4)])
def test_majority(size: int, need: int) -> None:
    assert majority(size) == need


@pytest.mark.parametrize(("healthy", "ok"), [
    ((True, True, True), True),
    ((True, True, False), True),  # one member being swapped: still quorum
    ((False, True, True), True),
    ((True, False, False), False),  # two down: the third has no leader
    ((False, False, False), False),
])
def test_verdict_three_members(healthy: tuple[bool, ...], ok: bool) -> None:
    why = verdict(_sample(*healthy), 3)
    assert (why == "") is ok
    if not ok:
        assert why.startswith(f"{sum(healthy)} of 3 members up, 2 needed: ")
        assert "m2 (down)" in why


def test_a_member_missing_from_the_sample_counts_as_down() -> None:
    assert verdict(_sample(True), 3) == "1 of 3 members up, 2 needed: "


def test_a_leader_change_is_a_dip_not_a_loss_of_quorum() -> None:
    """m1 restarts; m2's linearizable /health read fails with "leader changed" while its raft
    already follows the new leader (7): quorum holds, and the sample is a dip in service."""
    moving = _sample(False, False, True, leaders=(0, 7, 7), at=2)
    assert verdict(moving, 3) == ""
    lost = _sample(False, False, True, leaders=(0, 0, 7))
    assert verdict(lost, 3).startswith("1 of 3 members up, 2 needed")
    samples = [_sample(True, True, True, at=1), moving, _sample(False, False, True, leaders=(0, 7, 7), at=3),
               _sample(False, True, True, at=4), _sample(True, False, False, leaders=(7, 7, 7), at=5)]
    assert dips(samples, 3) == [Dip(2, 3, 2, "m1 (down), m2 (down)"), Dip(5, 5, 1, "m2 (down), m3 (down)")]
    assert dips(samples[:1], 3) == []


def _etcd(health: dict[str, tuple[int, str]], status: dict[str, dict[str, str]]) -> httpx.MockTransport:
    """Answers as etcd does: /health on each member's metrics address, the status on its client URL."""
    def handle(req: httpx.Request) -> httpx.Response:
        host = req.url.host
        if req.url.path == "/health":
            if host not in health:
                raise httpx.ConnectError("connection refused", request=req)
            code, body = health[host]
            return httpx.Response(code, text=body)
        if req.url.path == "/v3/maintenance/status" and req.method == "POST" and host in status:
            return httpx.Response(200, text=json.dumps(status[host]))
        return httpx.Response(404)
    return httpx.MockTransport(handle)


MEMBERS = [MemberEndpoints(f"m{i}", f"http://10.0.0.{i}:2381/health", f"https://10.0.0.{i}:2379") for i in (1, 2, 3)]


async def test_sampler_reads_health_leader_and_version() -> None:
    transport = _etcd(
        health={"10.0.0.1": (200, '{"health":"true"}'), "10.0.0.2": (503, '{"health":"false","reason":"no leader"}')},
        status={"10.0.0.1": {"version": "3.5.1", "leader": "99"}, "10.0.0.2": {"version": "3.4.23", "leader": "0"}},
    )
    ticks = iter(range(100))
    sampler = QuorumSampler(MEMBERS, every_s=3600, clock=lambda: float(next(ticks)), transport=transport)
    async with sampler:
        s = await sampler.sample_once()
    m1, m2, m3 = s.members
    assert m1 == MemberSample("m1", True, leader=99, version="3.5.1", answered=True)
    assert (m2.healthy, m2.leader, m2.version, m2.answered) == (False, 0, "3.4.23", True)
    assert m2.error == 'HTTP 503 {"health":"false","reason":"no leader"}'
    assert not m3.healthy and not m3.answered and m3.error.startswith("ConnectError") and m3.version == ""
    # m2 runs without a leader this instant (a leader moving): quorum holds, service dips
    assert verdict(s, 3) == "" and dips([s], 3)[0].reason.startswith("m2 (HTTP 503")
    lost = QuorumSample(at=1, members=(m1, MemberSample("m2", False, error="ConnectError: refused"), m3))
    assert verdict(lost, 3) == "1 of 3 members up, 2 needed: m2 (ConnectError: refused), m3 (" + m3.error + ")"


async def test_below_and_between_select_samples() -> None:
    sampler = QuorumSampler(MEMBERS)
    sampler.samples = [_sample(True, True, True, at=1), _sample(True, False, False, at=2), _sample(True, True, False, at=3)]
    assert [(s.at, why.split(":")[0]) for s, why in sampler.below()] == [(2, "1 of 3 members up, 2 needed")]
    assert [s.at for s in sampler.between(2, 3)] == [2, 3]


async def test_sampler_keeps_sampling_until_left() -> None:
    transport = _etcd(health={f"10.0.0.{i}": (200, '{"health": "true"}') for i in (1, 2, 3)}, status={})
    sampler = QuorumSampler(MEMBERS, every_s=0.0, transport=transport)
    async with sampler:
        while len(sampler.samples) < 3:  # the background task appends; each await yields to it
            await sampler.sample_once()
    count = len(sampler.samples)
    assert count >= 3 and not sampler.below()
    for _ in range(5):
        await asyncio.sleep(0)
    assert len(sampler.samples) == count  # nothing more once left
