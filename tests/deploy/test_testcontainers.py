"""The testcontainers path (tests/containers.py): where a container engine answers and
BKE_TESTCONTAINERS=1, BKE's streams are declared on a containerised NATS and a containerised
Redis stores and returns a value; elsewhere (these machines) it skips, saying why."""
from __future__ import annotations

import nats
import pytest
import redis.asyncio as aioredis

from bke.adapters.bus.streams import STREAMS, ensure_streams

from ..containers import engine_problem


def test_the_path_says_why_it_cannot_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BKE_TESTCONTAINERS", raising=False)
    assert "BKE_TESTCONTAINERS is not 1" in (engine_problem() or "")
    monkeypatch.setenv("BKE_TESTCONTAINERS", "1")
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/bke-no-engine.sock")
    problem = engine_problem()
    assert problem is not None and "no container engine answers" in problem


@pytest.mark.integration
async def test_streams_and_store_on_containers(container_nats_url: str, container_redis_url: str) -> None:
    nc = await nats.connect(container_nats_url, connect_timeout=10)
    try:
        js = nc.jetstream()
        await ensure_streams(js)
        names = {s.config.name for s in await js.streams_info()}
        assert {d.name for d in STREAMS} <= names
    finally:
        await nc.close()
    client = aioredis.from_url(container_redis_url, decode_responses=True)
    try:
        await client.set("bke:testcontainers", "ok")
        assert await client.get("bke:testcontainers") == "ok"
    finally:
        await client.aclose()
