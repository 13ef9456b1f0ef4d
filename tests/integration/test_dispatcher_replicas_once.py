"""What two dispatcher replicas must each do only once, against a real Redis: end an install
(compare-and-set) and send a cluster's periodic health round (a lease per period)."""
from __future__ import annotations

import asyncio
from datetime import datetime, timezone

import pytest
from redis.asyncio import Redis

from bke.adapters.state import PlanCache
from bke.adapters.state.keys.dispatcher import install_key, installs_index
from bke_dispatcher.health import HealthMonitor
from bke_dispatcher.state import DispatcherState

from .test_dispatcher import _stored_cluster

pytestmark = pytest.mark.integration


async def test_of_two_replicas_ending_an_install_at_once_one_does(redis_url, redis_client):
    r = Redis.from_url(redis_url)
    try:
        await r.hset(install_key("c"), mapping={"requestId": "req-1", "status": "Running"})
        a, b = DispatcherState(r), DispatcherState(r)
        won = await asyncio.gather(a.finish_install("c", "req-1", status="Succeeded", finishedAt="t1"),
                                   b.finish_install("c", "req-1", status="Succeeded", finishedAt="t2"))
        assert sorted(won) == [False, True]
        assert (await r.hget(install_key("c"), "finishedAt")) in (b"t1", b"t2")
        # ended: neither a late replica nor another request's end changes it
        assert not await a.finish_install("c", "req-1", status="Failed", message="late")
        await r.hset(install_key("c"), "status", "Running")
        assert not await a.finish_install("c", "req-2", status="Succeeded")
        assert await r.hget(install_key("c"), "status") == b"Running"
    finally:
        await r.aclose()


async def test_two_replicas_send_one_health_round_per_period(redis_url, redis_client):
    r = Redis.from_url(redis_url)
    sent: list[str] = []

    async def publish(body: bytes, subject: str, headers: dict[str, str]) -> None:
        sent.append(headers["Nats-Msg-Id"])

    async def sign(cmd):  # the signature is not what this test is about
        return cmd.to_bytes()

    try:
        plan, _ = await _stored_cluster(r, "rounds")
        await r.hset(install_key("rounds"), mapping={"requestId": "req-1", "status": "Succeeded"})
        await r.sadd(installs_index(), "rounds")
        now = lambda: datetime.now(timezone.utc)  # noqa: E731
        monitors = [HealthMonitor(DispatcherState(r), PlanCache(r), publish, now, 60.0, sign=sign, owner=owner)
                    for owner in ("replica-a", "replica-b")]
        counts = await asyncio.gather(*(m.round() for m in monitors))
        assert sorted(counts) == [0, len(plan.nodes)]  # one replica's round; the other found it taken
        assert len(sent) == len(set(sent)) == len(plan.nodes)
        winner = monitors[counts.index(len(plan.nodes))]
        assert await winner.round() == len(plan.nodes)  # its next period: the lease is its own
    finally:
        await r.aclose()
