"""Attacks on the bus with each identity's own creds, against a real nats-server in operator mode.

Every refusal has its positive control: the legitimate holder does the same thing and it works
(or, for a destructive act, it is shown to have the effect the refusal prevented). A server that
refused everything, or permissions that allowed everything, would fail this file.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import time
from datetime import datetime, timezone
from collections.abc import AsyncIterator
from pathlib import Path

import nats
import pytest
from nats.js.api import StreamConfig

import bke.adapters.bus.service as service_module
from bke.adapters.auth import agent_permissions, identity_name, inbox_prefix, write_creds
from bke.adapters.bus.service import make_service
from bke.adapters.bus import quotas
from bke.adapters.bus.quotas import AGENT_MAX_PAYLOAD, AGENT_OUTPUT_MAX_MSG, AGENT_OUTPUT_SUBJECT_MSGS, AGENT_SUBJECT_MSGS
from bke.adapters.bus.streams import (AGENT_OUTPUT_STREAM, AGENT_STREAM, BUCKETS, OBJECT_BUCKET, STREAMS, StreamsNotDeclared,
                                      check_streams, ensure_streams)
from bke.contracts.node_commands import NODE_COMMANDS_ANSWERED, NODE_COMMANDS_SEND
from bke.contracts.agent import AGENTS_PROVISION, agent_subject
from bke.contracts.agent_facts import AGENT_FACTS_GET, AGENT_FACTS_QUEUE
from bke.contracts.vrrp_password import VRRP_PASSWORD_GET, VRRP_PASSWORD_QUEUE
from bke.contracts.agent_steps import ETCD_SNAPSHOT_BUCKET
from bke.contracts.identity import renew_identity_subject
from bke.contracts.certs import CERTS_ISSUED
from bke.adapters.auth.agent_renewal import RENEW_ALL
from bke.adapters.etcdsnap.upload import publish_object
from bke.adapters.runtime import EmbeddedRuntime
from bke.adapters.settings import ServiceSettings
from tests.bus_identity_helpers import CLUSTER, Client, _authority, _connect, _identity

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
SERVICES = ("planner", "certs", "renderer", "dispatcher", "upgrader")
IDENTITIES = (*SERVICES, "operator", "dashboard", "streams", "agent", "renewer")
NODE = "node-a"


@pytest.fixture
async def clients(secure: EmbeddedRuntime, tmp_path: Path) -> AsyncIterator[dict[str, Client]]:
    out = {role: await _identity(secure, tmp_path, role, NODE if role == "agent" else None) for role in IDENTITIES}
    yield out
    for c in out.values():
        await c.nc.close()


async def _answered(client: Client, subject: str, payload: bytes = b"", headers: dict[str, str] | None = None) -> bool:
    """True: the server let the request through and something answered it (JetStream's API, or a
    stream's PubAck for a stored subject); False: refused for permissions. Both are waited for
    under a deadline: a slow answer is never taken for a refusal, nor the reverse."""
    inbox = client.nc.new_inbox()
    sub = await client.nc.subscribe(inbox, max_msgs=1)
    needle = f'permissions violation for publish to "{subject}"'.lower()
    seen = sum(needle in e.lower() for e in client.errors)
    await client.nc.publish(subject, payload, reply=inbox, headers=headers)
    await client.nc.flush()
    deadline = asyncio.get_running_loop().time() + 5
    while asyncio.get_running_loop().time() < deadline:
        if sum(needle in e.lower() for e in client.errors) > seen:
            return False
        try:
            await sub.next_msg(timeout=0.05)
            return True
        except nats.errors.TimeoutError:
            continue
    raise AssertionError(f"{subject}: neither answered nor refused within 5 s")


# (subject, who may) for JetStream API calls that answer when allowed. The payloads are harmless:
# an allowed call answers (even with an error document), a refused one never reaches JetStream.
API_MATRIX: tuple[tuple[str, frozenset[str]], ...] = (
    ("$JS.API.STREAM.UPDATE.BKE_AGENT", frozenset({"streams"})),
    ("$JS.API.STREAM.UPDATE.BKE_EVENTS", frozenset({"streams"})),
    ("$JS.API.STREAM.CREATE.EVIL", frozenset()),
    ("$JS.API.STREAM.DELETE.BKE_EVENTS", frozenset()),
    ("$JS.API.STREAM.PURGE.BKE_AGENT", frozenset()),
    (f"$JS.API.STREAM.PURGE.OBJ_{ETCD_SNAPSHOT_BUCKET}", frozenset()),
    ("$JS.API.STREAM.MSG.DELETE.BKE_COMMANDS", frozenset()),
    ("$JS.API.CONSUMER.DELETE.BKE_EVENTS.certs-plans", frozenset()),
    ("$JS.API.CONSUMER.CREATE.BKE_EVENTS.certs-plans.bke.v1.plan.created", frozenset({"certs"})),
    ("$JS.API.CONSUMER.CREATE.BKE_AGENT.x.bke.v1.agent.c1.node-a.command", frozenset()),
    ("$JS.API.CONSUMER.CREATE.BKE_EVENTS", frozenset()),
    ("$JS.API.CONSUMER.MSG.NEXT.BKE_AGENT_OUT.dispatcher-results", frozenset({"dispatcher"})),
    ("$JS.API.CONSUMER.CREATE.BKE_AGENT_OUT.x.bke.v1.agent.c1.node-a.result", frozenset()),
    ("$JS.API.STREAM.UPDATE.BKE_AGENT_OUT", frozenset({"streams"})),
    ("$JS.API.STREAM.PURGE.BKE_AGENT_OUT", frozenset()),
    ("$JS.API.STREAM.INFO.BKE_EVENTS", frozenset({*SERVICES, "operator", "dashboard", "streams"})),
    ("$JS.API.STREAM.MSG.GET.BKE_DEADLETTER", frozenset({"operator"})),  # `bke deadletters`
    ("$JS.API.STREAM.MSG.GET.BKE_EVENTS", frozenset()),
)


@pytest.mark.parametrize("subject,allowed", API_MATRIX, ids=[s for s, _ in API_MATRIX])
async def test_jetstream_api_matrix(clients: dict[str, Client], subject: str, allowed: frozenset[str]) -> None:
    payload = b'{"batch":1,"expires":1000000}' if ".MSG.NEXT." in subject else b""
    if ".STREAM.UPDATE." in subject:  # the declared config itself: the positive control changes nothing
        js = clients["streams"].nc.jetstream()
        payload = json.dumps((await js.stream_info(subject.rsplit(".", 1)[1])).config.as_dict()).encode()
    got = {role: await _answered(c, subject, payload) for role, c in clients.items()}
    assert {r for r, ok in got.items() if ok} == set(allowed)


# (subject, who may publish) of stored subjects (a stream's PubAck answers an allowed publish),
# on the bus and into the object buckets (a publish there can carry `Nats-Rollup: all`, which
# empties the bucket).
PUBLISH_MATRIX: tuple[tuple[str, frozenset[str]], ...] = (
    # the dispatcher alone commands agents; the upgrader asks it to (bke.contracts.node_commands)
    (agent_subject(CLUSTER, NODE, "command"), frozenset({"dispatcher"})),
    (NODE_COMMANDS_SEND, frozenset({"upgrader"})),
    (NODE_COMMANDS_ANSWERED, frozenset({"dispatcher"})),
    (CERTS_ISSUED, frozenset({"certs"})),
    (agent_subject(CLUSTER, "node-b", "result"), frozenset()),
    (agent_subject(CLUSTER, NODE, "result"), frozenset({"agent"})),
    (f"$O.{OBJECT_BUCKET}.M.eA", frozenset({"operator"})),
)


@pytest.mark.parametrize("subject,allowed", PUBLISH_MATRIX, ids=[s for s, _ in PUBLISH_MATRIX])
async def test_publish_matrix(clients: dict[str, Client], subject: str, allowed: frozenset[str]) -> None:
    got = {role: await _answered(c, subject, b"{}") for role, c in clients.items()}
    assert {r for r, ok in got.items() if ok} == set(allowed)


async def test_only_the_operator_may_ask_to_provision_an_agent(clients: dict[str, Client]) -> None:
    """Provisioning re-keys a node (certs answers it). A dashboard, a service or an agent is refused;
    the operator's request reaches certs (positive control: certs' own subscription)."""
    for role in (*SERVICES, "dashboard", "agent", "streams"):
        assert await clients[role].pub_refused(AGENTS_PROVISION), role
    sub = await clients["certs"].nc.subscribe(AGENTS_PROVISION)
    await clients["certs"].nc.flush()
    await clients["operator"].nc.publish(AGENTS_PROVISION, b"{}")
    await clients["operator"].nc.flush()
    assert (await sub.next_msg(timeout=5)).data == b"{}"


async def test_only_a_nodes_agent_asks_to_renew_its_identity_and_only_the_renewer_hears_it(
        clients: dict[str, Client]) -> None:
    """A renewal request names the node's subject: nobody but that node's agent may publish it
    (another node's agent neither), nobody but the renewer may hear it; the agent's own request
    reaches the renewer's subscription (positive control)."""
    own, other = renew_identity_subject(CLUSTER, NODE), renew_identity_subject(CLUSTER, "node-b")
    for role in (role for role in IDENTITIES if role != "agent"):
        assert await clients[role].pub_refused(own), role
    assert await clients["agent"].pub_refused(other)
    for role in (role for role in IDENTITIES if role != "renewer"):
        assert await clients[role].sub_refused(own), role
    sub = await clients["renewer"].nc.subscribe(RENEW_ALL, queue="renewer")
    await clients["renewer"].nc.flush()
    await clients["agent"].nc.publish(own, b"{}")
    await clients["agent"].nc.flush()
    msg = await sub.next_msg(timeout=5)
    assert (msg.subject, msg.data) == (own, b"{}")


@pytest.mark.parametrize("subject, queue, asker, answerer", [
    (AGENT_FACTS_GET, AGENT_FACTS_QUEUE, "upgrader", "dispatcher"),
    (VRRP_PASSWORD_GET, VRRP_PASSWORD_QUEUE, "upgrader", "renderer"),
])
async def test_only_the_asker_asks_another_services_answer_and_only_its_owner_hears_it(
        clients: dict[str, Client], subject: str, queue: str, asker: str, answerer: str) -> None:
    """The agents' facts are the dispatcher's answer to the upgrader (bke.contracts.agent_facts),
    the VRRP password the renderer's (bke.contracts.vrrp_password): nobody else may ask (a
    dashboard, the operator, an agent neither), nobody else may hear the question; the asker's
    request reaches the owner's queue group and its answer comes back (positive control: the
    responder's `allow_responses`)."""
    for role in (role for role in IDENTITIES if role != asker):
        assert await clients[role].pub_refused(subject), role
    for role in (role for role in IDENTITIES if role != answerer):
        assert await clients[role].sub_refused(subject), role
    sub = await clients[answerer].nc.subscribe(subject, queue=queue)
    await clients[answerer].nc.flush()
    asked = asyncio.create_task(clients[asker].nc.request(subject, b"{}", timeout=5))
    msg = await sub.next_msg(timeout=5)
    await msg.respond(b"answered")
    assert (await asked).data == b"answered"


async def test_nobody_but_the_deploy_identity_can_source_the_agent_stream_into_events(
        clients: dict[str, Client], secure: EmbeddedRuntime, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The renderer adding BKE_AGENT as a source of BKE_EVENTS would read every node's commands.
    Refused for every service; the deploy identity could (the positive control), after which a
    service refuses to start on the drifted stream and `ensure_streams` puts the config back."""
    deploy_js = clients["streams"].nc.jetstream()
    cfg = (await deploy_js.stream_info("BKE_EVENTS")).config
    evil = StreamConfig.from_response({**cfg.as_dict(), "sources": [{"name": "BKE_AGENT"}]})
    body = json.dumps(evil.as_dict()).encode()
    for role in (*SERVICES, "operator", "dashboard", "agent"):
        assert not await _answered(clients[role], "$JS.API.STREAM.UPDATE.BKE_EVENTS", body), role
    assert not (await deploy_js.stream_info("BKE_EVENTS")).config.sources
    try:
        await deploy_js.update_stream(evil)
        assert [s.name for s in (await deploy_js.stream_info("BKE_EVENTS")).config.sources or []] == ["BKE_AGENT"]
        assert any("sources" in p for p in await check_streams(deploy_js))
        assert secure.info is not None
        monkeypatch.setattr(service_module, "STREAMS_WAIT_S", 0.5)
        svc = make_service("planner", ServiceSettings(nats_url=secure.info.nats_url, redis_url=secure.info.redis_url,
                                                      nats_creds=tmp_path / "planner.creds",
                                                      nats_inbox_prefix=inbox_prefix("planner")))
        with pytest.raises(StreamsNotDeclared, match="BKE_EVENTS: has sources"):
            await svc.start()
        await svc.stop_http()
    finally:
        await ensure_streams(deploy_js)
    assert not (await deploy_js.stream_info("BKE_EVENTS")).config.sources and await check_streams(deploy_js) == []


async def test_a_rollup_into_the_blob_bucket_is_refused_to_all_but_its_writer(clients: dict[str, Client]) -> None:
    """`Nats-Rollup: all` on any subject of an object bucket empties it: shown by its writer."""
    operator_js = clients["operator"].nc.jetstream()
    store = await operator_js.object_store(OBJECT_BUCKET)
    await store.put("specs/keep.yaml", b"kind: BKECluster\n")
    meta = f"$O.{OBJECT_BUCKET}.M.c3BlY3Mva2VlcC55YW1s"
    for role in (*SERVICES, "dashboard", "agent", "streams"):
        assert not await _answered(clients[role], meta, b"{}", headers={"Nats-Rollup": "all"}), role
    assert (await store.get("specs/keep.yaml")).data == b"kind: BKECluster\n"
    # positive control: the writer's rollup does what the others were stopped from doing
    ack = await operator_js.publish(f"$O.{OBJECT_BUCKET}.M.eA", b"{}", headers={"Nats-Rollup": "all"})
    assert ack.seq > 0
    info = await operator_js.stream_info(f"OBJ_{OBJECT_BUCKET}")
    assert info.state.messages == 1  # everything else is gone


async def test_a_reply_subject_that_is_not_an_inbox_gets_no_answer(clients: dict[str, Client], secure: EmbeddedRuntime,
                                                                   tmp_path: Path) -> None:
    """A requester naming `bke.v1.certs.issued` as its reply would have the planner publish a
    certs event (nats-server lets responses past publish permissions). The planner answers
    inboxes only; the legitimate request right after is answered (positive control)."""
    assert secure.info is not None
    svc = make_service("planner", ServiceSettings(nats_url=secure.info.nats_url, redis_url=secure.info.redis_url,
                                                  nats_creds=tmp_path / "planner.creds",
                                                  nats_inbox_prefix=inbox_prefix("planner")))
    await svc.start()
    try:
        js = clients["operator"].nc.jetstream()
        before = (await js.stream_info("BKE_EVENTS", subjects_filter=CERTS_ISSUED)).state.subjects or {}
        await clients["operator"].nc.publish("bke.v1.health.planner", b"", reply=CERTS_ISSUED)
        answer = await clients["operator"].nc.request("bke.v1.health.planner", b"", timeout=10)
        assert json.loads(answer.data)["service"] == "planner"
        after = (await js.stream_info("BKE_EVENTS", subjects_filter=CERTS_ISSUED)).state.subjects or {}
        assert after.get(CERTS_ISSUED, 0) == before.get(CERTS_ISSUED, 0)
    finally:
        await svc.stop()


async def test_no_creds_no_bus(secure: EmbeddedRuntime) -> None:
    with pytest.raises(Exception, match="(?i)authorization"):
        await _connect(secure, None, None)


async def test_an_agent_adds_snapshots_but_cannot_roll_up_or_delete_them(clients: dict[str, Client]) -> None:
    """The agent publishes into the snapshot bucket (its upload), so NATS permissions cannot stop
    a `Nats-Rollup: all` header there: the bucket's stream refuses rollups, deletes and purges
    (bke.adapters.bus.streams.APPEND_ONLY_BUCKETS). Positive control: the agent's own upload is stored and
    read back; the rollup is answered with an error and every object is still there."""
    agent_js = clients["agent"].nc.jetstream()
    info = await publish_object(agent_js, ETCD_SNAPSHOT_BUCKET, f"{CLUSTER}/etcd-data/keep", [b"sealed" * 1000],
                                headers={"Bke-Test": ["1"]}, description="test", now=datetime.now(timezone.utc))
    stream = f"OBJ_{ETCD_SNAPSHOT_BUCKET}"
    before = (await clients["operator"].nc.jetstream().stream_info(stream)).state.messages
    assert before >= info.chunks + 1
    with pytest.raises(nats.js.errors.APIError, match="(?i)rollup"):
        await agent_js.publish(f"$O.{ETCD_SNAPSHOT_BUCKET}.M.eA", b"{}", headers={"Nats-Rollup": "all"})
    for subject in (f"$JS.API.STREAM.PURGE.{stream}", f"$JS.API.STREAM.MSG.DELETE.{stream}", f"$JS.API.STREAM.DELETE.{stream}"):
        assert not await _answered(clients["agent"], subject, b"{}"), subject
    # even the deploy identity, which may update the stream, cannot make it forget: deletes and
    # purges are refused by the stream itself
    deploy_js = clients["streams"].nc.jetstream()
    cfg = (await deploy_js.stream_info(stream)).config
    assert not cfg.allow_rollup_hdrs and cfg.deny_delete and cfg.deny_purge
    store = await clients["operator"].nc.jetstream().object_store(ETCD_SNAPSHOT_BUCKET)
    assert (await store.get(f"{CLUSTER}/etcd-data/keep")).data == b"sealed" * 1000
    assert (await clients["operator"].nc.jetstream().stream_info(stream)).state.messages == before


async def _agent_of(rt: EmbeddedRuntime, tmp: Path, cluster: str, node: str) -> Client:
    """A node's agent identity in any cluster (`_identity` makes them in CLUSTER)."""
    name = identity_name("agent", cluster, node)
    user = _authority(rt).user(name, agent_permissions(cluster, node), iat=int(time.time()))
    return await _connect(rt, write_creds(tmp / f"{name}.creds", user.creds), inbox_prefix(name))


async def _taken(js: nats.js.JetStreamContext, durable: str, subject: str, deadline_s: float = 30.0) -> bytes:
    """Fetch and acknowledge from a service's consumer on the outputs' stream until a message on
    `subject` comes (the flood before it is taken and acknowledged on the way); its body."""
    sub = await js.pull_subscribe("bke.v1.agent.*.*.result", durable=durable, stream=AGENT_OUTPUT_STREAM)
    deadline = asyncio.get_running_loop().time() + deadline_s
    while asyncio.get_running_loop().time() < deadline:
        try:
            msgs = await sub.fetch(64, timeout=1)
        except (nats.errors.TimeoutError, asyncio.TimeoutError):
            continue
        for m in msgs:
            await m.ack()
            if m.subject == subject:
                return m.data
    raise AssertionError(f"{subject}: never delivered to {durable}")


async def test_an_agents_flood_stays_on_its_own_subjects(clients: dict[str, Client], secure: EmbeddedRuntime,
                                                         tmp_path: Path) -> None:
    """One node publishing messages of the largest size the outputs' stream takes, as fast as it
    can, on its own result subject: the stream keeps at most AGENT_OUTPUT_SUBJECT_MSGS of them
    (its own oldest go), a larger one is refused, and meanwhile another cluster's agent's result
    is stored and taken by the dispatcher's consumer (positive control), and the command waiting
    for another node in the commands' stream is untouched."""
    other_command = agent_subject(CLUSTER, "node-b", "command")
    await clients["dispatcher"].nc.jetstream().publish(other_command, b"for-b")
    js = clients["operator"].nc.jetstream()  # stream info only: nobody but a consumer reads the agent streams
    own = agent_subject(CLUSTER, NODE, "result")
    agent = clients["agent"].nc
    bystander = await _agent_of(secure, tmp_path, "c2", "node-x")
    theirs = agent_subject("c2", "node-x", "result")
    before = (await js.stream_info(AGENT_OUTPUT_STREAM)).state.bytes
    try:
        biggest = b"x" * (AGENT_OUTPUT_MAX_MSG - 512)  # headers and subject count against the limit too
        flood = 4 * AGENT_OUTPUT_SUBJECT_MSGS + 8
        for i in range(flood):
            await agent.publish(own, biggest)
            if i == flood // 2:  # another cluster's node answers in the middle of the flood
                assert (await bystander.nc.jetstream().publish(theirs, b'{"mine":true}')).seq > 0
        # the flood's last message, with its PubAck: stored after every one before it
        await agent.jetstream().publish(own, biggest)
        with pytest.raises(nats.js.errors.BadRequestError, match="(?i)message size exceeds"):
            await agent.jetstream().publish(own, biggest + b"x" * 1024)
        state = (await js.stream_info(AGENT_OUTPUT_STREAM, subjects_filter=own)).state
        assert state.subjects == {own: AGENT_OUTPUT_SUBJECT_MSGS}
        assert state.bytes - before <= AGENT_OUTPUT_SUBJECT_MSGS * AGENT_OUTPUT_MAX_MSG  # the whole stream grew by that
        kept = await js.stream_info(AGENT_OUTPUT_STREAM, subjects_filter=theirs)
        assert kept.state.subjects == {theirs: 1}
        assert await _taken(clients["dispatcher"].nc.jetstream(), "dispatcher-results", theirs) == b'{"mine":true}'
        assert (await js.stream_info(AGENT_STREAM, subjects_filter=other_command)).state.subjects == {other_command: 1}
    finally:
        await bystander.nc.close()


async def test_an_agent_cannot_send_a_message_over_its_payload_limit(clients: dict[str, Client], secure: EmbeddedRuntime,
                                                                    tmp_path: Path) -> None:
    """The agent's JWT carries `payload`: nats-server refuses a larger message (and drops the
    connection); a message at the limit goes through (positive control)."""
    agent = await _identity(secure, tmp_path, "agent", "node-p")
    try:
        # its heartbeat (core NATS): the outputs' stream takes less than the JWT allows
        subject = agent_subject(CLUSTER, "node-p", "heartbeat")
        heard = await clients["dispatcher"].nc.subscribe(subject)
        await clients["dispatcher"].nc.flush()
        await agent.nc.publish(subject, b"x" * (AGENT_MAX_PAYLOAD - 64))
        assert len((await heard.next_msg(timeout=5)).data) == AGENT_MAX_PAYLOAD - 64
        await agent.nc.publish(subject, b"x" * (AGENT_MAX_PAYLOAD + 1))
        with contextlib.suppress(nats.errors.Error, asyncio.TimeoutError):
            await agent.nc.flush(timeout=5)
        deadline = asyncio.get_running_loop().time() + 10
        while not agent.nc.is_closed:  # nats-server drops a connection that exceeds its payload limit
            assert asyncio.get_running_loop().time() < deadline, "the connection outlived its payload violation"
            await asyncio.sleep(0.02)  # polling under a deadline
        assert "maximum payload" in str(agent.nc.last_error).lower()
        with pytest.raises(nats.errors.TimeoutError):  # the larger one never reached anyone
            await heard.next_msg(timeout=1)
    finally:
        await agent.nc.close()


async def test_every_stream_and_bucket_has_a_size(clients: dict[str, Client]) -> None:
    js = clients["streams"].nc.jetstream()
    for name in (*(d.name for d in STREAMS), *(f"OBJ_{b}" for b, _ in BUCKETS)):
        cfg = (await js.stream_info(name)).config
        assert cfg.max_bytes == quotas.max_bytes(name, 1), name
    assert (await js.stream_info(AGENT_STREAM)).config.max_msgs_per_subject == AGENT_SUBJECT_MSGS
    assert (await js.stream_info(AGENT_OUTPUT_STREAM)).config.max_msgs_per_subject == AGENT_OUTPUT_SUBJECT_MSGS
