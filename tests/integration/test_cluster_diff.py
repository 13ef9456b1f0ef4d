"""`bke.v1.cluster.diff` and `bke apply --dry-run`: the planner compares a spec with the stored
plan on a real NATS and Redis; nothing is written."""
from __future__ import annotations

import asyncio
import json
import uuid

import pytest

from bke.adapters.bus import EventWatch
from bke.contracts import INSTALL_CLUSTER, PLAN_CREATED
from bke.contracts.changes import CLUSTER_DIFF, ClusterChanges, DiffCluster, parse_changes_reply
from bke.contracts.status import StatusError
from bke_cli.main import main
from bke_planner.app import create_service
from bke_planner.settings import PlannerSettings

pytestmark = pytest.mark.integration
SPLIT = open("examples/split-etcd.yaml").read()


def worker(host: str, ip: str) -> str:
    return (f"---\napiVersion: bke.bocloud.com/v1beta1\nkind: BKENode\nmetadata: {{name: big-{host}}}\n"
            f"spec:\n  hostname: {host}\n  ip: {ip}\n  role: [node]\n")


@pytest.fixture
async def planner_with_big(nats_url, redis_url, nats_client, redis_client):
    svc = create_service(PlannerSettings(nats_url=nats_url, redis_url=redis_url, max_deliver=3))
    await svc.start()
    try:
        rid = str(uuid.uuid4())
        async with EventWatch(nats_client, [PLAN_CREATED]) as watch:
            await nats_client.jetstream().publish(INSTALL_CLUSTER, json.dumps({"requestId": rid, "spec": SPLIT}).encode())
            await watch.wait_for(lambda e: e.data.get("requestId") == rid, timeout=30)
        yield svc
    finally:
        await svc.stop()


async def ask(nats_client, body: bytes):
    msg = await nats_client.request(CLUSTER_DIFF, body, timeout=60)
    return parse_changes_reply(msg.data)


async def test_the_planner_answers_what_would_change(planner_with_big, nats_client, redis_client):
    before = {k: await redis_client.dump(k) for k in sorted(await redis_client.keys("bke:big:*"))}
    spec = SPLIT + worker("worker5", "127.0.20.105") + worker("worker6", "127.0.20.106")
    reply = await ask(nats_client, DiffCluster(request_id="r1", spec=spec).to_bytes())
    assert isinstance(reply, ClusterChanges), reply
    assert reply.nodes_added == ["worker5", "worker6"] and not reply.refusals
    assert [(a.kind, a.host) for a in reply.actions] == [("join", "worker5"), ("join", "worker6")]
    assert reply.files == [] and reply.stored_digest != reply.desired_digest

    same = await ask(nats_client, DiffCluster(request_id="r2", spec=SPLIT).to_bytes())
    assert isinstance(same, ClusterChanges) and not same.actions and same.stored_digest == same.desired_digest

    refused = await ask(nats_client, DiffCluster(request_id="r3", spec=SPLIT.replace(
        "podSubnet: 10.128.0.0/14", "podSubnet: 10.132.0.0/14")).to_bytes())
    assert isinstance(refused, ClusterChanges) and [r.path for r in refused.refusals] == ["NetworkUnchanged"]

    bad = await ask(nats_client, DiffCluster(request_id="r4", spec=SPLIT.replace("role: [node]", "role: [nod]", 1)).to_bytes())
    assert isinstance(bad, StatusError) and bad.reason == "Invalid"
    assert any("unknown role 'nod'" in e.message and e.path.startswith("nodes[") for e in bad.errors)

    other = await ask(nats_client, DiffCluster(request_id="r5", spec=SPLIT.replace("name: big\n", "name: other\n", 1)).to_bytes())
    assert isinstance(other, StatusError) and other.reason == "NotFound"

    malformed = await ask(nats_client, b'{"requestId": ""}')
    assert isinstance(malformed, StatusError) and malformed.reason == "Invalid"

    # a dry run writes nothing
    after = {k: await redis_client.dump(k) for k in sorted(await redis_client.keys("bke:big:*"))}
    assert after == before


async def test_bke_apply_dry_run_prints_the_changes(planner_with_big, nats_url, tmp_path, capsys):
    spec = tmp_path / "big.yaml"
    cm = SPLIT.replace("      etcdEvents:", "      controllerManager:\n        extraArgs: {kube-api-qps: \"80\"}\n      etcdEvents:")
    spec.write_text(cm)
    code = await asyncio.to_thread(main, ["apply", str(spec), "--dry-run", "--nats", nats_url])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "roll" in out and "m4" in out and "m5" in out and "kube-controller-manager" in out
    assert "changed /etc/kubernetes/manifests/kube-controller-manager.yaml" in out
    assert "2 node(s) receive a command; every other node none" in out

    spec.write_text(SPLIT.replace("host: 127.0.20.250, port: 36443", "host: 127.0.20.251, port: 36443"))
    code = await asyncio.to_thread(main, ["apply", str(spec), "--dry-run", "--nats", nats_url])
    out, _ = capsys.readouterr()
    assert code == 2 and "REFUSED EndpointUnchanged" in out


def without(text: str, host: str) -> str:
    docs = text.split("\n---\n")
    return "\n---\n".join(d for d in docs if f"hostname: {host}\n" not in d)


async def test_the_dry_run_reads_live_etcd_health_from_the_dispatcher(planner_with_big, nats_client):
    """Removing two of etcd-events' three members passes while they are healthy; with events1
    unhealthy in the dispatcher's latest health round (its status answer, served here by the
    dispatcher's own status builder), 3 -> 2 would leave one healthy member of two: refused."""
    from bke.contracts.status import STATUS_GET, GetStatus
    from bke_dispatcher.status import build_status

    shrink = without(without(SPLIT, "events2"), "events3")
    unknown = await ask(nats_client, DiffCluster(request_id="h1", spec=shrink).to_bytes())
    assert isinstance(unknown, ClusterChanges) and not unknown.refusals
    assert unknown.etcd_health == "unknown" and "no answer on bke.v1.status.get" in unknown.etcd_health_message

    asked: list[GetStatus] = []
    health = {"events1": {"status": "Unhealthy", "failing": ["health:etcd-events"]}, "m1": {"status": "Healthy"}}

    async def dispatcher(msg):
        req = GetStatus.model_validate_json(msg.data)
        asked.append(req)
        doc = build_status(req, {"status": "Succeeded", "requestId": "i"}, {}, ["m1", "events1", "events2"], {}, {},
                           health, None)
        await msg.respond(doc.to_bytes())

    sub = await nats_client.subscribe(STATUS_GET, cb=dispatcher)
    try:
        await nats_client.flush()
        refused = await ask(nats_client, DiffCluster(request_id="h2", spec=shrink).to_bytes())
    finally:
        await sub.unsubscribe()
    assert isinstance(refused, ClusterChanges)
    assert refused.etcd_health == "checked" and refused.etcd_unhealthy == {"etcd-events": ["events1"]}
    assert [r.path for r in refused.refusals] == ["EtcdQuorum"] and "events1" not in refused.refusals[0].message
    assert [(a.cluster, a.nodes) for a in asked] == [("big", "unhealthy")]
