"""A service's HTTP side (bke.adapters.http) on a real NATS and Redis: the probes, and /metrics counting
the messages its consumers handle."""
from __future__ import annotations

import asyncio
import json
import socket
import uuid

import httpx
import pytest

from bke.adapters.bus import EventWatch
from bke.contracts import INSTALL_CLUSTER, PLAN_CREATED
from bke.adapters.http.token_gate import ExposedWithoutToken
from bke_planner.app import create_service
from bke_planner.settings import PlannerSettings

pytestmark = pytest.mark.integration
SEED = open("examples/seed-3m1w.yaml").read()


def _sample(text: str, name: str, **labels: str) -> float | None:
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        metric, _, rest = key.partition("{")
        if metric == name and ",".join(sorted(rest.rstrip("}").split(","))) == want:
            return float(value)
    return None


async def _poll(get, until, timeout: float = 15.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        r = await get()
        if until(r):
            return r
        assert asyncio.get_running_loop().time() < deadline, f"still {r.status_code}: {r.text[:300]}"
        await asyncio.sleep(0.1)


async def test_probes_and_metrics_follow_the_work(nats_url, redis_url, nats_client):
    svc = create_service(PlannerSettings(nats_url=nats_url, redis_url=redis_url, http_port=0))
    await svc.start()
    try:
        assert svc.http is not None and svc.http.port
        async with httpx.AsyncClient(base_url=svc.http.url, timeout=5) as http:
            assert (await http.get("/healthz")).json() == {"service": "planner", "alive": True}
            ready = await _poll(lambda: http.get("/readyz"), lambda r: r.status_code == 200)
            assert ready.json()["ready"] is True and ready.json()["conditions"]["redis"] is True
            assert (await http.get("/nothing-here")).status_code == 404

            before = (await http.get("/metrics")).text
            assert _sample(before, "bke_service_ready", service="planner") == 1.0
            handled0 = _sample(before, "bke_messages_handled_total", service="planner", subject=INSTALL_CLUSTER) or 0.0

            rid = str(uuid.uuid4())
            async with EventWatch(nats_client, [PLAN_CREATED]) as watch:
                await nats_client.jetstream().publish(INSTALL_CLUSTER, json.dumps({"requestId": rid, "spec": SEED}).encode())
                await watch.wait_for(lambda e: e.data.get("requestId") == rid, timeout=15)

            # the ack (and so the count) follows the event: polled with a deadline
            after = await _poll(lambda: http.get("/metrics"), lambda r: (_sample(
                r.text, "bke_messages_handled_total", service="planner", subject=INSTALL_CLUSTER) or 0) >= handled0 + 1)
            assert (_sample(after.text, "bke_handler_seconds_count", service="planner", subject=INSTALL_CLUSTER) or 0) >= 1
            assert after.headers["content-type"].startswith("text/plain")
        url = svc.http.url
    finally:
        await svc.stop()
    assert svc.http is None
    with pytest.raises(httpx.ConnectError):  # stopped with the service
        async with httpx.AsyncClient(timeout=2) as http:
            await http.get(f"{url}/healthz")


async def test_a_taken_port_fails_the_start(nats_url, redis_url):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        svc = create_service(PlannerSettings(nats_url=nats_url, redis_url=redis_url, http_port=port))
        with pytest.raises(OSError):
            await svc.start_http()
        assert svc.http is None


async def test_no_port_no_http(nats_url, redis_url):
    svc = create_service(PlannerSettings(nats_url=nats_url, redis_url=redis_url))
    await svc.start_http()
    assert svc.http is None


async def test_an_exposed_dashboard_asks_for_its_bearer_token(nats_url, redis_url, tmp_path):
    """Beyond loopback the service refuses to start without a token; with one, every request but
    the probes needs it (the probes stay open for the kubelet and Docker)."""
    exposed = create_service(PlannerSettings(nats_url=nats_url, redis_url=redis_url, http_port=0, http_host="0.0.0.0"))
    with pytest.raises(ExposedWithoutToken, match="BKE_HTTP_TOKEN_FILE"):
        await exposed.start_http()
    assert exposed.http is None
    token = "t0ken-" + uuid.uuid4().hex
    (tmp_path / "token").write_text(token + "\n")
    svc = create_service(PlannerSettings(nats_url=nats_url, redis_url=redis_url, http_port=0, http_host="0.0.0.0",
                                         http_token_file=tmp_path / "token"))
    await svc.start_http()
    try:
        assert svc.http is not None
        async with httpx.AsyncClient(base_url=svc.http.url, timeout=5) as http:
            assert (await http.get("/healthz")).status_code == 200
            assert (await http.get("/readyz")).status_code in (200, 503)  # open; ready or not
            for path in ("/metrics", "/", "/asyncapi"):
                refused = await http.get(path)
                assert refused.status_code == 401 and refused.headers["www-authenticate"].startswith("Bearer"), path
                assert (await http.get(path, headers={"Authorization": "Bearer wrong-token-123456"})).status_code == 401
                assert (await http.get(path, headers={"Authorization": f"Bearer {token}"})).status_code == 200, path
    finally:
        await svc.stop_http()
