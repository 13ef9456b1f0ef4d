"""A new dispatcher takes over an install the previous schema left half done.

The fixture (tests/fixtures/bus/v0/seed-midinstall.json, made by make_v0_midinstall.py next to
it) is a lab's Redis and event stream in the middle of an install, in the previous schema:
records without their version header (version 0) and messages without the `bke-schema` header.
This test loads it into a real Redis and a real JetStream, starts today's dispatcher on it and
null agents for the nodes, and the install finishes: every old message was read (none
dead-lettered), every old record too, and no command ran twice."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis
from redis.asyncio import Redis

from bke.adapters.bus import EventWatch
from bke.adapters.bus.streams import ensure_streams
from bke.contracts.base import SCHEMA_HEADER, schema_headers
from bke.contracts.certs import CERTS_SEALED, CertsSealed
from bke.adapters.state import RedisPlanStore
from bke.adapters.state.keys.node_files import node_files_key
from bke.adapters.state.keys.dispatcher import install_key
from bke.adapters.state.state_init import ensure_state
from bke.core.secrets import box_for
from bke.core.secrets.record_signing import WRITERS
from bke.adapters.state.nodefiles import RedisNodeFiles
from bke.core.state.nodefiles import file_from_bytes
from bke.core.state.schema import SCHEMA_FIELD
from bke_agent.fleet import Fleet
from bke_agent.settings import AgentSettings
from bke_dispatcher.app import create_service
from bke_dispatcher.settings import DispatcherSettings
from tests.trust_helpers import deployment_key

pytestmark = pytest.mark.integration
FIXTURE = Path("tests/fixtures/bus/v0/seed-midinstall.json")


async def _load_keys(r: Redis, keys: list[dict]) -> None:
    for entry in keys:
        key, value = entry["key"], entry["value"]
        if entry["type"] == "string":
            await r.set(key, value)
        elif entry["type"] == "hash":
            await r.hset(key, mapping=value)
        else:
            await r.sadd(key, *value)


async def _dead_letters(js) -> int:
    info = await js.stream_info("BKE_DEADLETTER", subjects_filter="bke.v1.deadletter.dispatcher")
    return sum((info.state.subjects or {}).values())


async def test_a_new_dispatcher_finishes_an_install_the_previous_schema_left_half_done(
        nats_url, redis_url, redis_client, nats_client, operator_box):
    doc = json.loads(FIXTURE.read_text())
    cluster = doc["cluster"]
    events = doc["events"]
    # the fixture is the previous schema: no record header carries its version, no message its form
    install = next(e["value"] for e in doc["keys"] if e["key"] == install_key(cluster))
    assert install["status"] == "Running" and SCHEMA_FIELD not in install
    assert events and all(SCHEMA_HEADER not in e for e in events)

    r = Redis.from_url(redis_url)
    js = nats_client.jetstream()
    await ensure_streams(js)
    svc, fleet = None, None
    try:
        await _load_keys(r, doc["keys"])
        # `bke state init` after the upgrade, as the admin: the writers' keys made, and the plan and
        # file sets the previous version stored unsigned signed with them (bke.adapters.state.sign_unsigned)
        init = redis.Redis.from_url(redis_url)
        try:
            signed = dict(ensure_state(init, None, record_boxes={w: box_for(w) for w in WRITERS}).signed_now)
        finally:
            init.close()
        assert signed["plan"] == 1 and signed["render"] == await r.hlen(node_files_key(cluster, "render")) > 0
        dead_before = await _dead_letters(js)
        for e in events:  # as the previous services published them: subject and body, no header
            await js.publish(e["subject"], e["data"].encode())
        hosts = [n.hostname for n in (await RedisPlanStore(r).load(cluster)).nodes]
        # null agents for the nodes (the lab's were never started); their keys are trusted the
        # way the certs service makes them trusted: a sealed bundle stored, `certs.sealed` said
        key = (await deployment_key(r, operator_box)).verify_key
        base = AgentSettings(cluster=cluster, node=hosts[0], backend="host", nats_url=nats_url, heartbeat_s=0)
        fleet = Fleet.null(nats_client, js, base, hosts, command_key=key)
        await RedisNodeFiles(r).put_many(cluster, "certs", {h: [file_from_bytes("/etc/kubernetes/pki/ca.crt", b"x")]
                                                            for h in hosts})

        svc = create_service(DispatcherSettings(nats_url=nats_url, redis_url=redis_url, owner="new-version", mode="lab",
                                                health_interval_s=0))
        async with EventWatch(nats_client, [f"bke.v1.install.{cluster}.finished"]) as watch:
            await svc.start()  # resumes the Running install it finds
            await fleet.start()
            agents = {n: i.agent_id for n, i in fleet.identities().items()}
            await js.publish(CERTS_SEALED, CertsSealed(cluster=cluster, nodes=hosts, agents=agents).to_bytes(),
                             headers=schema_headers())  # what today's certs service says
            done = await watch.wait_for(lambda e: True, timeout=90)
        assert done.data["status"] == "Succeeded", done.data
        # the old events were read, not refused: handled by this dispatcher, none dead-lettered
        assert svc.handled["dispatcher-plans"] >= 1 and svc.handled["dispatcher-rendered"] >= 1
        assert svc.handled["dispatcher-certs-issued"] >= 1
        assert await _dead_letters(js) == dead_before
        # every command ran once: node-env x4, certs x4, etcd x3, init x1, join x2, workers x1, health x4
        assert fleet.executed == 19 and fleet.replayed == 0
    finally:
        if fleet is not None:
            await fleet.stop(grace=1.0)
        if svc is not None:
            await svc.stop()
        await r.aclose()
