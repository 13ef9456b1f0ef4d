"""The planner on a real NATS (JetStream) and a real Redis, both started by the fixtures."""
from __future__ import annotations

import json
import uuid

import pytest

from bke.adapters.bus import EventWatch, put_blob
from bke.contracts import CLUSTER_REJECTED, INSTALL_CLUSTER, PLAN_CREATED
from bke.core.plan import Plan
from bke.core.spec.synth import synth_spec_text
from bke_planner.app import create_service
from bke_planner.settings import PlannerSettings

pytestmark = pytest.mark.integration
SEED = open("examples/seed-3m1w.yaml").read()


@pytest.fixture
async def planner(nats_url, redis_url, redis_client):
    svc = create_service(PlannerSettings(nats_url=nats_url, redis_url=redis_url, max_deliver=3))
    await svc.start()
    try:
        yield svc
    finally:
        await svc.stop()


@pytest.fixture
async def watch(nats_client):
    async with EventWatch(nats_client, [PLAN_CREATED, CLUSTER_REJECTED, "bke.v1.deadletter.>"]) as w:
        yield w


def by_request(rid):
    return lambda e: e.data.get("requestId") == rid


async def request(nats_client, payload) -> None:
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    await nats_client.jetstream().publish(INSTALL_CLUSTER, body)


async def test_plan_created_then_rejections_then_still_serving(planner, watch, nats_client, redis_client):
    rid = str(uuid.uuid4())
    await request(nats_client, {"requestId": rid, "spec": SEED})
    ev = await watch.wait_for(by_request(rid), timeout=15)
    assert ev.subject == PLAN_CREATED
    assert ev.data["cluster"] == "seed" and ev.data["nodes"] == 4 and ev.data["etcdClusters"] == ["etcd-data"]
    stored = Plan.model_validate_json(await redis_client.get(ev.data["planKey"]))
    assert [n.hostname for n in stored.nodes] == ["master1", "master2", "master3", "node1"]

    # malformed JSON: rejected, request id unknown
    await request(nats_client, b"{not json")
    bad = await watch.wait_for(lambda e: e.subject == CLUSTER_REJECTED and e.data["requestId"] is None, timeout=15)
    assert bad.data["errors"] and bad.data["cluster"] is None

    # valid JSON, invalid spec: every error with its path
    rid2 = str(uuid.uuid4())
    await request(nats_client, {"requestId": rid2, "spec": SEED.replace("role: [node]", "role: [node, etcd-evnt]")})
    rej = await watch.wait_for(by_request(rid2), timeout=15)
    assert rej.subject == CLUSTER_REJECTED and rej.data["cluster"] == "seed"
    assert {"path": "nodes[3].spec.role[1]", "message": rej.data["errors"][0]["message"]} == rej.data["errors"][0]
    assert "unknown role 'etcd-evnt'" in rej.data["errors"][0]["message"]

    # the service still handles a good request afterwards
    rid3 = str(uuid.uuid4())
    await request(nats_client, {"requestId": rid3, "spec": SEED.replace("name: seed", "name: seed-two")})
    ok = await watch.wait_for(by_request(rid3), timeout=15)
    assert ok.subject == PLAN_CREATED and ok.data["cluster"] == "seed-two"
    assert not [e for e in watch.seen if e.subject.startswith("bke.v1.deadletter")]


async def test_missing_fields_and_both_sources_are_rejected_with_paths(planner, watch, nats_client):
    rid = str(uuid.uuid4())
    await request(nats_client, {"requestId": rid})
    rej = await watch.wait_for(by_request(rid), timeout=15)
    assert rej.subject == CLUSTER_REJECTED and "exactly one of 'spec' and 'specRef'" in rej.data["errors"][0]["message"]
    await request(nats_client, {"spec": SEED, "extra": 1})
    rej = await watch.wait_for(lambda e: e.subject == CLUSTER_REJECTED and any(x["path"] == "extra" for x in e.data["errors"]), timeout=15)
    assert any(x["path"] == "requestId" for x in rej.data["errors"])


async def test_same_request_is_idempotent_and_a_change_is_refused(planner, watch, nats_client):
    rid = str(uuid.uuid4())
    await request(nats_client, {"requestId": rid, "spec": SEED})
    first = await watch.wait_for(by_request(rid), timeout=15)
    rid_again = str(uuid.uuid4())
    await request(nats_client, {"requestId": rid_again, "spec": SEED})
    again = await watch.wait_for(by_request(rid_again), timeout=15)
    assert again.subject == PLAN_CREATED and again.data["planDigest"] == first.data["planDigest"]
    rid_changed = str(uuid.uuid4())
    await request(nats_client, {"requestId": rid_changed, "spec": SEED.replace("v1.12.0", "v1.12.1")})
    changed = await watch.wait_for(by_request(rid_changed), timeout=15)
    # addons are not part of placement, so the plan digest is what decides: use a real change
    if changed.subject == PLAN_CREATED:
        rid_changed = str(uuid.uuid4())
        await request(nats_client, {"requestId": rid_changed, "spec": SEED.replace("role: [node]", "role: [node, etcd-event]")})
        changed = await watch.wait_for(by_request(rid_changed), timeout=15)
    assert changed.subject == CLUSTER_REJECTED
    assert "changing a running cluster is not supported yet" in changed.data["errors"][0]["message"]


async def test_large_spec_travels_by_reference(planner, watch, nats_client, redis_client):
    text = synth_spec_text(8000, name="huge").encode()
    assert len(text) > 1024 * 1024  # over NATS' default max_payload
    ref = await put_blob(nats_client.jetstream(), "bke-blobs", "specs/huge.yaml", text)
    # a spec by reference is not kept for ever: its bucket drops objects after 7 days
    assert (await nats_client.jetstream().stream_info("OBJ_bke-blobs")).config.max_age == 7 * 86400
    rid = str(uuid.uuid4())
    await request(nats_client, {"requestId": rid, "specRef": ref})
    ev = await watch.wait_for(by_request(rid), timeout=60)
    assert ev.subject == PLAN_CREATED and ev.data["nodes"] == 8000
    assert await redis_client.strlen(ev.data["planKey"]) > 1024 * 1024
    rid2 = str(uuid.uuid4())
    await request(nats_client, {"requestId": rid2, "specRef": "bke-blobs/specs/missing.yaml"})
    rej = await watch.wait_for(by_request(rid2), timeout=15)
    assert rej.subject == CLUSTER_REJECTED and rej.data["errors"][0]["path"] == "specRef"


async def test_the_old_name_of_the_install_command_is_still_served_with_a_warning(planner, watch, nats_client, caplog):
    """`bke.v1.cluster.requested` was renamed `bke.v1.cluster.install` (commands are imperative);
    a request on the old name, from older tooling or queued across an upgrade, is not lost."""
    from bke.contracts.subjects import LEGACY_CLUSTER_REQUESTED

    caplog.set_level("WARNING", logger="bke.adapters.bus.handler")
    rid = str(uuid.uuid4())
    await nats_client.jetstream().publish(LEGACY_CLUSTER_REQUESTED, json.dumps({"requestId": rid, "spec": SEED}).encode())
    ev = await watch.wait_for(by_request(rid), timeout=15)
    assert ev.subject == PLAN_CREATED and ev.data["cluster"] == "seed"
    assert any("deprecated subject bke.v1.cluster.requested" in r.getMessage() for r in caplog.records)
