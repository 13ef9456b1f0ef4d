"""Each service's dashboard and domain figures on a real NATS and Redis, the service in process
with `http_port=0`: the page lists what the service stored, a hostile value comes out escaped,
/metrics carries the figures, and every service serves the event catalogue."""
from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any, AsyncIterator

import httpx
import pytest
import yaml

from bke.adapters.bus import EventWatch
from bke.contracts import CLUSTER_REJECTED, INSTALL_CLUSTER, PLAN_CREATED
from bke.contracts.asyncapi import build_asyncapi
from bke.contracts.render import MANIFESTS_RENDERED, RENDER_MANIFESTS
from bke.core.pki import IssueOptions
from bke.adapters.pki.store_redis import RedisPkiStore
from bke.core.plan import Plan, plan_spec_text
from bke.core.secrets import create_key_file
from bke.adapters.state import RedisPlanStore, plan_digest
from bke.adapters.state.keys.renderer import recent_renders_key
from bke.adapters.state.recent import RecentLog
from bke.core.upgrade.run import NodeOutcome, StepRun, UpgradeRun
from bke_certs.app import create_service as certs_service
from bke_certs.service_core import ensure_cluster_certs
from bke_certs.settings import CertsSettings
from bke_planner.app import create_service as planner_service
from bke_planner.settings import PlannerSettings
from bke_renderer.app import create_service as renderer_service
from bke_renderer.settings import RendererSettings
from bke_upgrader.app import create_service as upgrader_service
from bke_upgrader.settings import UpgraderSettings
from bke_upgrader.store import UpgradeStore

from .test_http_side import _poll, _sample

pytestmark = pytest.mark.integration
SEED = open("examples/seed-3m1w.yaml").read()
EVIL = '<script>alert("x")</script>'
EVIL_NAME = '"><img src=x onerror=alert(1)>'  # a path segment: no "/"


def _spec(name: str) -> str:
    docs = list(yaml.safe_load_all(SEED))
    for d in docs:
        if d.get("kind") == "BKECluster":
            d["metadata"]["name"] = name
    return yaml.safe_dump_all(docs, sort_keys=False)


def _plan(name: str) -> Plan:
    outcome = plan_spec_text(_spec(name))
    assert outcome.plan is not None, outcome.errors
    return outcome.plan


def _assert_escaped(page: str) -> None:
    assert "<script>alert" not in page and "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page


def _plans(metrics: str, result: str) -> float:
    return _sample(metrics, "bke_plans_total", result=result) or 0.0


async def _counts_once_drained(js: Any, http: httpx.AsyncClient, durable: str) -> dict[str, float]:
    """The planner's plan counts once its consumer has nothing pending or unacknowledged."""
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        info = await js.consumer_info("BKE_COMMANDS", durable)
        if info.num_pending == 0 and info.num_ack_pending == 0:
            break
        assert asyncio.get_running_loop().time() < deadline, info
        await asyncio.sleep(0.1)
    metrics = (await http.get("/metrics")).text
    return {r: _plans(metrics, r) for r in ("created", "rejected")}


@contextlib.asynccontextmanager
async def served(svc: Any) -> AsyncIterator[httpx.AsyncClient]:
    await svc.start()
    try:
        async with httpx.AsyncClient(base_url=svc.http.url, timeout=10) as http:
            await _poll(lambda: http.get("/readyz"), lambda r: r.status_code == 200)
            yield http
    finally:
        await svc.stop()


async def test_planner_page_lists_plans_and_rejections_and_counts_them(nats_url, redis_url, redis_client, nats_client):
    svc = planner_service(PlannerSettings(nats_url=nats_url, redis_url=redis_url, http_port=0))
    cluster, ok_id, bad_id = f"p{uuid.uuid4().hex[:8]}", str(uuid.uuid4()), str(uuid.uuid4())
    async with served(svc) as http:
        js = nats_client.jetstream()
        # the session's stream may still hold other tests' install requests for the planner's
        # durable consumer: counted once they are handled, so this test counts its own on top
        before = await _counts_once_drained(js, http, "planner")
        async with EventWatch(nats_client, [PLAN_CREATED, CLUSTER_REJECTED]) as watch:
            await js.publish(INSTALL_CLUSTER, json.dumps({"requestId": ok_id, "spec": _spec(cluster)}).encode())
            await js.publish(INSTALL_CLUSTER, json.dumps({"requestId": bad_id, "spec": _spec(EVIL)}).encode())
            await watch.wait_for(lambda e: e.data.get("requestId") == ok_id, timeout=15)
            await watch.wait_for(lambda e: e.data.get("requestId") == bad_id, timeout=15)
        # the list is written after the publish: polled with a deadline
        page = (await _poll(lambda: http.get("/"), lambda r: ok_id in r.text and bad_id in r.text)).text
        assert cluster in page and "4 nodes" in page and "cluster.metadata.name" in page
        _assert_escaped(page)
        rejected = (await http.get("/", params={"result": "rejected"})).text
        assert bad_id in rejected and ok_id not in rejected
        bad = await http.get("/", params={"result": "maybe"})
        assert bad.status_code == 400 and "result" in bad.text

        metrics = (await http.get("/metrics")).text
        assert _plans(metrics, "created") == before["created"] + 1
        assert _plans(metrics, "rejected") == before["rejected"] + 1

        # the event catalogue, from the running code
        cat = await http.get("/asyncapi")
        assert cat.status_code == 200 and "bke.v1.cluster.install" in cat.text and 'id="schema-InstallCluster"' in cat.text
        assert "<script" not in cat.text  # offline and script-free
        doc = yaml.safe_load((await http.get("/asyncapi.yaml")).text)
        assert doc == build_asyncapi()


async def test_certs_page_lists_certificates_with_expiry_and_nodes(nats_url, redis_url, redis_client, tmp_path,
                                                                   monkeypatch):
    box = create_key_file(tmp_path / "secret.key")
    monkeypatch.setenv("BKE_SECRET_KEY_FILE", str(tmp_path / "secret.key"))
    now = datetime.now(timezone.utc)
    # issued 340 days ago: the leaves (one year) expire within 30 days, the CAs much later
    plan = _plan("certpage").model_copy(update={"cluster": EVIL_NAME})
    report = await ensure_cluster_certs(plan, RedisPkiStore(redis_client), now - timedelta(days=340), box,
                                        options=IssueOptions(procs=1))
    assert report.issued
    svc = certs_service(CertsSettings(nats_url=nats_url, redis_url=redis_url, http_port=0))
    escaped = "&quot;&gt;&lt;img src=x onerror=alert(1)&gt;"
    async with served(svc) as http:
        index = (await http.get("/")).text
        assert "<img" not in index and escaped in index
        assert 'href="/clusters/%22%3E%3Cimg%20src%3Dx%20onerror%3Dalert%281%29%3E"' in index

        page = await http.get(f"/clusters/{EVIL_NAME}")
        assert page.status_code == 200
        assert "<img" not in page.text and escaped in page.text
        assert "apiserver" in page.text and "CA" in page.text and "master1" in page.text
        held = (await http.get(f"/clusters/{EVIL_NAME}", params={"node": "node1", "limit": 1})).text
        assert "2 certificate(s) held by node node1" in held and "rows 1-1 of 2" in held and "next" in held
        assert (await http.get(f"/clusters/{EVIL_NAME}", params={"limit": "x"})).status_code == 400
        assert (await http.get("/clusters/nothing-here")).status_code == 404

        metrics = (await http.get("/metrics")).text
        label = EVIL_NAME.replace('"', '\\"')  # the exposition format escapes quotes
        leaves = _sample(metrics, "bke_certificates", cluster=label, expires_within="30d")
        cas = _sample(metrics, "bke_certificates", cluster=label, expires_within="later")
        assert leaves and leaves > 5 and cas and cas >= 3
        assert _sample(metrics, "bke_certificates", cluster=label, expires_within="expired") == 0
        assert (await http.get("/asyncapi")).status_code == 200


async def test_renderer_page_lists_versions_and_renders(nats_url, redis_url, redis_client, nats_client):
    plan = _plan(f"r{uuid.uuid4().hex[:8]}")
    pj = plan.to_json()
    assert await RedisPlanStore(redis_client).save(plan, pj, plan_digest(pj), "req-plan", "2026-01-01T00:00:00Z")
    await RecentLog(redis_client, recent_renders_key()).add({"result": "failed", "cluster": "old", "errors": [EVIL]})
    svc = renderer_service(RendererSettings(nats_url=nats_url, redis_url=redis_url, http_port=0))
    rid = str(uuid.uuid4())
    async with served(svc) as http:
        async with EventWatch(nats_client, [MANIFESTS_RENDERED]) as watch:
            await nats_client.jetstream().publish(RENDER_MANIFESTS, json.dumps({"requestId": rid, "cluster": plan.cluster}).encode())
            await watch.wait_for(lambda e: e.data.get("requestId") == rid, timeout=30)
        page = (await _poll(lambda: http.get("/"), lambda r: rid in r.text)).text
        assert plan.cluster in page and "rendered" in page and plan.kubernetes_version in page
        assert "id='versions'" in page and "kubernetes/1.31" in page  # the versions table
        _assert_escaped(page)
        metrics = (await http.get("/metrics")).text
        assert _sample(metrics, "bke_renders_total", kubernetes_version=plan.kubernetes_version, result="rendered") == 1.0
        assert (await http.get("/asyncapi")).status_code == 200


def _run(cluster: str) -> UpgradeRun:
    return UpgradeRun(
        request_id="up-1", cluster=cluster, current={"kubernetes": "1.33.2"}, target={"kubernetes": "1.34.1"},
        steps=[StepRun("pre-checks", status="Succeeded"),
               StepRun("control-plane", batches=[["m1"], ["m2"], ["m3"]], status="Running", batch=1, done=1, sent=True),
               StepRun("workers", batches=[["w1", "w2"]], drain=True, stage="drain")],
        started_at="2026-01-01T00:00:00Z", left_out=["w9"])


async def test_upgrader_page_shows_runs_steps_and_failures_live(nats_url, redis_url, redis_client, tmp_path, monkeypatch):
    monkeypatch.setenv("BKE_SECRET_KEY_FILE", str(tmp_path / "secret.key"))
    create_key_file(tmp_path / "secret.key")
    store = UpgradeStore(redis_client)
    assert await store.start(_run("u1"), lambda current: "") == ""
    svc = upgrader_service(UpgraderSettings(nats_url=nats_url, redis_url=redis_url, http_port=0, mode="lab"))
    async with served(svc) as http:
        index = (await http.get("/")).text
        assert 'href="/upgrades/u1"' in index and "control-plane" in index and 'fetch("/runs"' in index
        page = (await http.get("/upgrades/u1")).text
        assert 'fetch("/upgrades/u1/fragment"' in page and "w9" in page
        metrics = (await http.get("/metrics")).text
        assert _sample(metrics, "bke_upgrade_nodes", cluster="u1", state="Upgraded") == 1.0  # m1
        assert _sample(metrics, "bke_upgrade_nodes", cluster="u1", state="Upgrading") == 1.0  # m2, in flight
        assert _sample(metrics, "bke_upgrade_nodes", cluster="u1", state="Pending") == 3.0
        ratio0 = _sample(metrics, "bke_upgrade_progress_ratio", cluster="u1")
        assert ratio0 is not None and 0 < ratio0 < 1

        # the run moves on and fails with a hostile agent message: the fragment the page polls shows it
        run = _run("u1")
        run.steps[1].batch, run.steps[1].done, run.steps[1].status = 2, 2, "Failed"
        run.failed = [NodeOutcome(hostname="m3", status="Failed", step="control-plane", failed_step="replace",
                                  stderr=EVIL)]
        run.status, run.message = "Failed", "m3 failed"
        await store.save(run)
        frag = (await http.get("/upgrades/u1/fragment")).text
        assert "Failures" in frag and "m3 failed" in frag and "<html" not in frag
        _assert_escaped(frag)
        metrics = (await http.get("/metrics")).text
        assert _sample(metrics, "bke_upgrade_nodes", cluster="u1", state="Failed") == 1.0
        assert (_sample(metrics, "bke_upgrade_progress_ratio", cluster="u1") or 0) > ratio0
        assert (await http.get("/upgrades/none")).status_code == 404
        assert (await http.get("/asyncapi.yaml")).status_code == 200
