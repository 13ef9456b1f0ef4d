"""`bke status` / `bke retry` / the install follower against a real dispatcher on real NATS and
Redis: status over the bus only (the CLI gets no Redis URL), checked against the committed
JSON schema."""
from __future__ import annotations

import asyncio
import io
import json
import os
import sys
from datetime import datetime, timezone
from pathlib import Path

import jsonschema
import pytest
from redis.asyncio import Redis
from rich.console import Console

from bke.adapters.bus.streams import ensure_streams
from bke.contracts.status import STATUS_GET, ClusterStatus, StatusError, GetStatus, parse_status_reply
from bke.core.plan import plan_spec_text
from bke.adapters.state import RedisPlanStore, plan_digest
from bke_cli.install_follow import submit_and_follow
from bke_dispatcher.app import create_service
from bke_dispatcher.settings import DispatcherSettings
from bke_dispatcher.state import DispatcherState

pytestmark = pytest.mark.integration
BKE = str(Path(sys.executable).parent / "bke")
SCHEMA = json.loads(Path("docs/status.schema.json").read_text())
REASON = "1 node(s) failed: node1; node1 step check:port-10250: port 10250 is in use"


async def bke(*args: str) -> tuple[int, str, str]:
    """The `bke` command as an operator runs it, with no Redis anywhere in its environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BKE_")}
    proc = await asyncio.create_subprocess_exec(BKE, *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    return proc.returncode, out.decode(), err.decode()


@pytest.fixture
async def failed_install(nats_url, redis_url, redis_client, nats_client):
    """A dispatcher, and the state it leaves when node1 failed preflight: node-env Failed."""
    await ensure_streams(nats_client.jetstream())
    r = Redis.from_url(redis_url)
    now = datetime.now(timezone.utc).isoformat()
    plan = plan_spec_text(open("examples/seed-3m1w.yaml").read().replace("name: seed", "name: stat")).plan
    pj = plan.to_json()
    assert await RedisPlanStore(r).save(plan, pj, plan_digest(pj), "req-stat", now)
    st = DispatcherState(r)
    await st.start_install("stat", "req-stat", now)
    await st.set_phase("stat", "agents", status="Succeeded", ok=4, total=4, startedAt=now, finishedAt=now)
    hosts = [n.hostname for n in plan.nodes]
    cmds = {h: {"id": f"stat/node-env/{h}/0", "gen": 0, "status": "Sent", "step": "", "stderr": "", "at": now} for h in hosts}
    await st.set_phase("stat", "node-env", status="Running", total=4, startedAt=now)
    await st.mark_sent("stat", "node-env", cmds, 4, now)
    for h in hosts:
        failed = h == "node1"
        await st.finish_command("stat", "node-env", h, f"stat/node-env/{h}/0", 0, "Failed" if failed else "Succeeded",
                                "check:port-10250" if failed else "", "port 10250 is in use" if failed else "", now)
    await st.set_phase("stat", "node-env", status="Failed", finishedAt=now, message=REASON)
    await st.set_install("stat", status="Failed", message=REASON, finishedAt=now, kind="operational", nodesChanged="1")
    svc = create_service(DispatcherSettings(nats_url=nats_url, redis_url=redis_url, owner="stat", mode="lab", health_interval_s=0))
    await svc.start()
    try:
        yield st
    finally:
        await svc.stop()
        await r.aclose()


async def test_bke_status_json_needs_only_nats_and_matches_the_schema(failed_install, nats_url):
    code, out, err = await bke("status", "stat", "--nats", nats_url, "-o", "json", "--nodes", "failed")
    assert code == 0, err
    doc = json.loads(out)
    jsonschema.Draft202012Validator(SCHEMA).validate(doc)
    assert doc["apiVersion"] == "bke.v1/ClusterStatus" and doc["status"] == "Failed" and doc["requestId"] == "req-stat"
    assert doc["kind"] == "operational" and doc["nodesChanged"] is True and doc["message"] == REASON
    assert doc["nodes"] == [{"hostname": "node1", "status": "Failed", "phase": "node-env", "step": "check:port-10250",
                             "labels": None, "taints": None, "health": None}]  # not labelled nor checked yet
    assert doc["nodeCounts"] == {"total": 4, "pending": 0, "running": 0, "succeeded": 3, "failed": 1}
    assert [(p["name"], p["status"], p["done"]) for p in doc["phases"][:3]] == [
        ("agents", "Succeeded", 4), ("node-env", "Failed", 3), ("certs", "Pending", 0)]
    assert doc["rotation"] is None

    code, out, _ = await bke("status", "stat", "--nats", nats_url, "--nodes", "all", "-o", "json")
    assert code == 0 and [n["hostname"] for n in json.loads(out)["nodes"]] == ["master1", "master2", "master3", "node1"]
    code, out, _ = await bke("status", "stat", "--nats", nats_url, "-o", "json")  # json lists every node by default
    assert code == 0 and [n["hostname"] for n in json.loads(out)["nodes"]] == ["master1", "master2", "master3", "node1"]
    code, out, _ = await bke("status", "stat", "--nats", nats_url)
    assert code == 0 and "node-env" in out and "node1" in out and "check:port-10250" in out


async def test_unknown_cluster_and_bad_requests_get_clear_answers(failed_install, nats_url, nats_client):
    code, out, err = await bke("status", "nosuch", "--nats", nats_url, "-o", "json")
    assert code == 2 and out == "" and "cluster 'nosuch': not found" in err
    reply = parse_status_reply((await nats_client.request(STATUS_GET, b'{"cluster": "stat", "limit": 0}', timeout=5)).data)
    assert isinstance(reply, StatusError) and reply.reason == "Invalid" and [e.path for e in reply.errors] == ["limit"]
    reply = parse_status_reply((await nats_client.request(STATUS_GET, b"not json", timeout=5)).data)
    assert isinstance(reply, StatusError) and reply.reason == "Invalid"
    # the responder is still there after both
    good = await nats_client.request(STATUS_GET, GetStatus(cluster="stat", nodes="none").to_bytes(), timeout=5)
    assert isinstance(parse_status_reply(good.data), ClusterStatus)


@pytest.mark.parametrize("kind, code", [("invalid", 2), ("operational", 1)])
async def test_the_follower_reports_the_failure_and_exits_by_its_kind(failed_install, nats_url, capsys, kind, code):
    await failed_install.set_install("stat", kind=kind)
    out = io.StringIO()
    assert await submit_and_follow(nats_url, b"", "stat", 20.0, Console(file=out, width=200), submit=False) == code
    err = capsys.readouterr().err
    assert f"ERROR install of stat failed in phase node-env: {REASON}" in err
    assert "ERROR failed node(s): node1" in err
    assert "node-env: Failed 3/4" in out.getvalue()


async def test_retry_checks_and_waits_for_the_pickup_over_the_bus(failed_install, nats_url):
    code, _, err = await bke("retry", "stat", "--nodes", "node1,nosuch", "--nats", nats_url)
    assert code == 2 and "--nodes: unknown node(s) nosuch" in err
    code, _, err = await bke("retry", "stat", "--nodes", "node1", "--nats", nats_url, "--no-follow")
    assert code == 0, err
    # the dispatcher put node1 back in flight (it now waits for inputs this test never stores)
    assert (await failed_install.install("stat"))["status"] == "Running"
    code, out, _ = await bke("status", "stat", "--nats", nats_url, "-o", "json")
    assert code == 0 and json.loads(out)["kind"] is None
    code, _, err = await bke("retry", "stat", "--nats", nats_url)
    assert code == 2 and "cluster 'stat' is Running: nothing to retry" in err
