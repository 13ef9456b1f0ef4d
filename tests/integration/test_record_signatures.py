"""Plans and rendered file sets are believed only with their writer's signature, on real Redis
and NATS. The attacker here writes Redis as the admin user does (every key): the plan rewritten,
a plan of another cluster or an older plan copied in, a node's rendered files changed. Each
refusal has its positive control beside it: the record as its writer stored it is used (for the
dispatcher, tests/integration/test_dispatcher.py installs from signed file sets).
"""
from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
from redis.asyncio import Redis

from bke.adapters.bus import EventWatch
from bke.adapters.bus.streams import ensure_streams
from bke.adapters.state import PlanCache, RedisPlanStore, plan_digest
from bke.adapters.state.keys.plan import plan_key, plan_meta_key
from bke.adapters.state.keys.certs import pki_key
from bke.adapters.state.keys.node_files import node_files_key, node_files_signatures_key
from bke.adapters.state.keys.trust import record_signing_key
from bke.adapters.state.nodefiles import RedisNodeFiles
from bke.adapters.state.plans import SIGNATURE_FIELD
from bke.contracts import PLAN_CREATED, PlanCreated
from bke.contracts.certs import CERTS_FAILED, CERTS_ISSUED
from bke.core.plan import plan_spec_text
from bke.core.secrets.record_signing import RecordKeyError, RecordSignatureError
from bke.core.state.nodefiles import NodeFile, file_from_bytes
from bke_certs.app import create_service as create_certs
from bke_certs.settings import CertsSettings
from bke_dispatcher.app import create_service as create_dispatcher
from bke_dispatcher.settings import DispatcherSettings
from tests.integration.test_dispatcher import _announce, _null_fleet, _stored_cluster
from tests.trust_helpers import provision

pytestmark = pytest.mark.integration
TIMEOUT = 30.0


def _node_json(files: list[NodeFile]) -> str:
    return json.dumps([f.model_dump(by_alias=True, mode="json") for f in files])


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


def _plan(name: str):  # noqa: ANN202
    return plan_spec_text(open("examples/seed-3m1w.yaml").read().replace("name: seed", f"name: {name}")).plan


async def _saved(r: Redis, name: str):  # noqa: ANN202
    plan = _plan(name)
    pj = plan.to_json()
    assert await RedisPlanStore(r).save(plan, pj, plan_digest(pj), f"req-{name}", _now())
    return plan, pj


async def test_a_plan_is_read_only_as_its_writer_signed_it(redis_client) -> None:
    r = redis_client
    plan, pj = await _saved(r, "sig-a")
    assert (await RedisPlanStore(r).load("sig-a")).cluster == "sig-a"  # as stored: used
    # rewritten bytes, the digest made to agree
    tampered = pj.replace('"sig-a"', '"sig-a" ', 1)
    await r.set(plan_key("sig-a"), tampered)
    await r.hset(plan_meta_key("sig-a"), "digest", plan_digest(tampered))
    with pytest.raises(RecordSignatureError, match=r"the plan of sig-a .*does not match"):
        await RedisPlanStore(r).load("sig-a")
    # the signature taken away
    await r.set(plan_key("sig-a"), pj)
    await r.hdel(plan_meta_key("sig-a"), SIGNATURE_FIELD)
    with pytest.raises(RecordSignatureError, match="carries no signature"):
        await PlanCache(r).load("sig-a")


async def test_a_signed_plan_of_one_cluster_is_refused_as_another_s(redis_client) -> None:
    r = redis_client
    await _saved(r, "sig-b")
    other, _ = await _saved(r, "sig-c")
    # cluster sig-b's plan and meta, signature and all, copied over sig-c's
    await r.set(plan_key("sig-c"), await r.get(plan_key("sig-b")))
    await r.delete(plan_meta_key("sig-c"))
    await r.hset(plan_meta_key("sig-c"), mapping=await r.hgetall(plan_meta_key("sig-b")))
    with pytest.raises(RecordSignatureError, match="the plan of sig-c"):
        await RedisPlanStore(r).load("sig-c")
    assert (await RedisPlanStore(r).load("sig-b")).cluster == "sig-b"


async def test_an_older_plan_written_back_is_refused_by_a_reader_that_read_the_newer(redis_client) -> None:
    r = redis_client
    plan, pj = await _saved(r, "sig-d")
    old_plan, old_meta = await r.get(plan_key("sig-d")), await r.hgetall(plan_meta_key("sig-d"))
    newer = pj.replace('"sig-d"', '"sig-d" ', 1)  # another plan of the same cluster, stored by its writer
    assert await RedisPlanStore(r).upgrade(plan, newer, plan_digest(newer), plan_digest(pj), "req-2", _now())
    cache = PlanCache(r)
    await cache.load("sig-d")
    await r.set(plan_key("sig-d"), old_plan)  # the older plan and meta, signed in their day, written back
    await r.hset(plan_meta_key("sig-d"), mapping=old_meta)
    with pytest.raises(RecordSignatureError, match="generation 1, older than generation 2"):
        await cache.load("sig-d")


async def test_without_the_writer_s_key_nothing_is_read_and_nothing_signed(redis_client, monkeypatch) -> None:
    r = redis_client
    await _saved(r, "sig-e")
    await r.delete(record_signing_key("plan"))  # the public half readers check with, gone
    with pytest.raises(RecordKeyError, match=r"the plan of sig-e \(bke:sig-e:plan\): no plan-signing key is stored"):
        await RedisPlanStore(r).load("sig-e")
    monkeypatch.delenv("BKE_KEY_FILE_PLAN")  # a process not given the plan writer's key file
    monkeypatch.delenv("BKE_SECRET_KEY_FILE", raising=False)
    plan = _plan("sig-f")
    with pytest.raises(RecordKeyError, match="not given the `plan` key file"):
        await RedisPlanStore(r).save(plan, plan.to_json(), plan_digest(plan.to_json()), "req-f", _now())
    assert not await r.exists(plan_key("sig-f"))


@pytest.fixture
async def certs(nats_url, redis_url, redis_client, nats_client, operator_box):  # noqa: ANN001, ANN201
    await ensure_streams(nats_client.jetstream())
    svc = create_certs(CertsSettings(nats_url=nats_url, redis_url=redis_url, renew_interval_s=0, processes=1))
    await svc.start()
    try:
        yield nats_client.jetstream()
    finally:
        await svc.stop()


async def _plan_created(js, name: str, digest: str) -> None:  # noqa: ANN001
    await js.publish(PLAN_CREATED, PlanCreated(request_id=f"req-{name}", cluster=name, plan_key=plan_key(name),
                                               plan_digest=digest, nodes=4, etcd_clusters=["etcd-data"]).to_bytes())


async def test_certs_issues_nothing_from_a_plan_rewritten_by_an_admin_writer(certs, redis_client, nats_client) -> None:
    js, r = certs, redis_client
    _, good = await _saved(r, "sig-ok")
    _, pj = await _saved(r, "sig-bad")
    tampered = pj.replace('"sig-bad"', '"sig-bad" ', 1)  # any change: the node list, an address, a SAN
    await r.set(plan_key("sig-bad"), tampered)
    await r.hset(plan_meta_key("sig-bad"), "digest", plan_digest(tampered))
    async with EventWatch(nats_client, [CERTS_FAILED, CERTS_ISSUED]) as watch:
        await _plan_created(js, "sig-bad", plan_digest(tampered))
        await _plan_created(js, "sig-ok", plan_digest(good))
        failed = await watch.wait_for(lambda e: e.data.get("cluster") == "sig-bad", timeout=TIMEOUT)
        issued = await watch.wait_for(lambda e: e.data.get("cluster") == "sig-ok", timeout=TIMEOUT)
    assert failed.subject == CERTS_FAILED and failed.data["kind"] == "invalid"
    assert "the plan of sig-bad" in failed.data["reason"] and "signature" in failed.data["reason"]
    assert issued.subject == CERTS_ISSUED  # the positive control: a plan as its writer signed it
    assert not await r.exists(pki_key("sig-bad", "manifest"), pki_key("sig-bad", "keys"))  # no key issued
    assert await r.exists(pki_key("sig-ok", "keys"))


async def test_the_dispatcher_sends_nothing_built_from_a_tampered_file_set(nats_url, redis_url, redis_client,
                                                                           nats_client, operator_box) -> None:
    r, js = Redis.from_url(redis_url), nats_client.jetstream()  # bytes: the command key is read as stored
    await ensure_streams(js)
    plan, digest = await _stored_cluster(r, "sig-files")
    hosts = [n.hostname for n in plan.nodes]
    assert await RedisNodeFiles(r).get("sig-files", "render", hosts[0])  # as the renderer signed them: read
    evil = [file_from_bytes("/etc/kubernetes/manifests/etcd.yaml", b"kind: Pod\nspec: {hostPID: true}\n", 0o600)]
    await r.hset(node_files_key("sig-files", "render"), hosts[0], _node_json(evil))
    with pytest.raises(RecordSignatureError, match=f"the rendered files of {hosts[0]} in sig-files"):
        await RedisNodeFiles(r).get("sig-files", "render", hosts[0])
    svc = create_dispatcher(DispatcherSettings(nats_url=nats_url, redis_url=redis_url, mode="lab", health_interval_s=0))
    await svc.start()
    fleet = await _null_fleet(nats_client, js, nats_url, "sig-files", plan, r, operator_box)
    await provision(r, "sig-files", fleet.identities())
    try:
        async with EventWatch(nats_client, ["bke.v1.install.sig-files.finished"]) as watch:
            await fleet.start()
            await _announce(js, "sig-files", digest, hosts, {n: i.agent_id for n, i in fleet.identities().items()})
            done = await watch.wait_for(lambda e: True, timeout=60)
    finally:
        await fleet.stop(grace=1.0)
        await svc.stop()
    try:
        assert await r.hlen(node_files_signatures_key("sig-files", "render")) == len(hosts)
    finally:
        await r.aclose()
    assert done.data["status"] == "Failed" and done.data["phase"] == "node-env"
    assert f"the rendered files of {hosts[0]} in sig-files" in done.data["message"]
    assert fleet.executed == 0  # no command carrying the renderer's files reached any node
