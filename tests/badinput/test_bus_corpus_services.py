"""The hostile bus corpus sent to a running service set (every service its own OS process, real
NATS JetStream and Redis from the fixtures): each service keeps running, every malformed message
a service consumes from a stream is dead-lettered (BKE_DEADLETTER) with its bytes, a malformed
install request is answered with a rejection, and a valid install still finishes afterwards."""
from __future__ import annotations

import asyncio
import base64
import json
import uuid

import pytest
from nats.js.errors import BadRequestError

from bke.adapters.bus import EventWatch, ensure_streams
from bke.adapters.bus.connect import BusAccess, connect_nats
from bke.adapters.bus.delivery import MAX_DEADLETTER_PAYLOAD
from bke.adapters.bus.quotas import AGENT_OUTPUT_MAX_MSG
from bke.contracts import CLUSTER_REJECTED, INSTALL_CLUSTER, InstallCluster
from bke.contracts.restore import RESTORE_ETCD, RESTORE_REJECTED
from bke.contracts.apply import APPLY_CLUSTER, APPLY_REJECTED
from bke.contracts.upgrade import RETRY_UPGRADE, UPGRADE_CLUSTER, UPGRADE_REJECTED
from bke.contracts.agent import AgentHeartbeat, AgentProvisioned, GetCommandKey, ProvisionAgent
from bke.contracts.health import GetHealth
from bke.contracts.status import StatusError
from bke.contracts.subjects import CHANNELS, COMMAND_SUBJECTS, DEADLETTER, EVENT_SUBJECTS, LEGACY_CLUSTER_REQUESTED, Channel
from bke.lab import forkserver
from bke.lab.supervisor import SERVICES, LabSupervisor
from bke.lab.trust import ensure_lab_command_key
from bke.adapters.provisioning import provision_agent
from bke.adapters.runtime import RuntimeInfo
from bke.adapters.runtime.processes import pid_alive
from bke.core.secrets.signing import parse_public_line
from bke.core.spec.synth import synth_spec_text
from bke_agent.fleet import Fleet
from bke_agent.settings import AgentSettings
from bke_planner.decide import request_id_of

from .bus_corpus import Hostile, hostile_bodies, valid_example

pytestmark = pytest.mark.integration
CLUSTER = "hostile"
# A few of each kind: what a forger or a broken client sends most (the unit fuzzers cover the rest).
# A user's install request is answered with a rejection naming the field, never dead-lettered.
# a user's requests: answered naming the field (an upgrade's retry is answered as an upgrade is)
ANSWERED = (INSTALL_CLUSTER, LEGACY_CLUSTER_REQUESTED, UPGRADE_CLUSTER, RETRY_UPGRADE, RESTORE_ETCD, APPLY_CLUSTER)
# answered by the upgrader on bke.v1.upgrade.rejected (an etcd restore and a changed spec on their own
# rejected subjects)
UPGRADER_ANSWERED = (UPGRADE_CLUSTER, RETRY_UPGRADE, RESTORE_ETCD, APPLY_CLUSTER)
KINDS = ("garbage", "empty-object", "deep-nesting", "extra-field", "oversized", "non-utf8-in-string")


def stored_channels() -> list[Channel]:
    """Channels kept in a stream that a BKE service consumes (their subjects concrete for node n0
    when deciding)."""
    stored = set(COMMAND_SUBJECTS) | set(EVENT_SUBJECTS)
    out = []
    for ch in CHANNELS:
        subject = ch.subject.format(cluster=CLUSTER, node="n0", service="x")
        matches = subject in stored or any(s.endswith("*.phase") and subject.endswith(".phase") or
                                           s.endswith("*.finished") and subject.endswith(".finished") or
                                           s.endswith("*.changed") and subject.endswith(".changed") for s in stored)
        is_agent_result = subject.startswith("bke.v1.agent.") and not subject.endswith(".command")
        if (matches or is_agent_result) and set(ch.receivers) & set(SERVICES) and not ch.subject.startswith(DEADLETTER):
            out.append(ch)
    return out


@pytest.fixture
async def services(tmp_path, runtime, nats_url, redis_url, redis_client, monkeypatch):
    monkeypatch.setenv("BKE_DISPATCHER_HEALTH_INTERVAL_S", "0")  # null agents serve no health URLs
    # the session's open bus (auth=False: a forger needs no identity here) and its Redis, where
    # each service logs in as its own ACL user (passwords kept in that runtime's directory)
    sup = LabSupervisor(tmp_path / "lab", auth=False)
    sup.runtime = runtime
    sup.workdir.mkdir(parents=True)
    sup.ensure_key_files()
    info = RuntimeInfo(nats_url=nats_url, redis_url=redis_url, nats_pid=0, redis_pid=0, nats_monitor_url="")
    pids = sup.ensure_services(info)
    try:
        yield sup, dict(pids), info
    finally:
        for name in SERVICES:
            sup.stop_service(name)
        forkserver.stop_server(sup.workdir)  # what forked them (the shared runtime stays up)


async def _check_answer(ch: Channel, subject: str, case: Hostile, data: bytes) -> None:
    """A hostile request's answer: `Invalid` (status, expiration), or not recorded naming the
    field (provisioning); a request whose answer does not depend on what was asked (a health
    probe, the public command key: both read no field) is answered as always, never failed."""
    if StatusError in ch.replies:
        reply = StatusError.model_validate_json(data)
        assert reply.reason == "Invalid", (subject, case.name, reply)
    elif ch.model is ProvisionAgent:
        provisioned = AgentProvisioned.model_validate_json(data)
        assert not provisioned.ok and case.names in provisioned.reason, (subject, case.name, provisioned)
    else:
        assert ch.model in (GetHealth, GetCommandKey), f"{subject}: say what a hostile request is answered with"
        assert len(ch.replies) == 1, ch.replies
        ch.replies[0].model_validate_json(data)


async def test_hostile_messages_are_dead_lettered_and_a_valid_install_still_goes_through(services, nats_url):
    sup, pids, info = services
    nc = await connect_nats(BusAccess(nats_url))
    js = nc.jetstream(timeout=30)
    try:
        await ensure_streams(js)
        await sup.wait_services_ready(js)
        sent: list[tuple[str, str, bytes]] = []
        refused: list[tuple[str, str]] = []
        async with EventWatch(nc, [f"{DEADLETTER}.>", CLUSTER_REJECTED, UPGRADE_REJECTED, RESTORE_REJECTED,
                                   APPLY_REJECTED]) as watch:
            for ch in stored_channels():
                for n, case in enumerate(hostile_bodies(ch.model, valid_example(ch.model))):
                    if case.name in KINDS or case.name.startswith("wrong-type-"):
                        # each case from its own node: an agent subject is one node's and keeps only
                        # its newest AGENT_OUTPUT_SUBJECT_MSGS outputs, so one node's flood would push
                        # out its own older ones before a consumer reads them (by design)
                        subject = ch.subject.format(cluster=CLUSTER, node=f"n{n}", service="x")
                        try:
                            await js.publish(subject, case.body)
                        except BadRequestError as exc:
                            # the agents' outputs stream stores no message over its size
                            # (bke.adapters.bus.quotas): refused at the door, nothing to dead-letter
                            assert exc.err_code == 10054 and len(case.body) > AGENT_OUTPUT_MAX_MSG, (subject, exc)
                            refused.append((subject, case.name))
                            continue
                        sent.append((subject, case.name, case.body))
            assert len(sent) > 100
            assert all(subject.startswith("bke.v1.agent.") for subject, _ in refused), refused
            # a user's request is answered with the field, not dead-lettered; everything else is kept
            # (an oversized one is kept truncated: the dead letter itself must fit in one message)
            expected = {(subj, base64.b64encode(body[:MAX_DEADLETTER_PAYLOAD]).decode()): name
                        for subj, name, body in sent if subj not in ANSWERED}
            # rejections carry the request id the planner could read; JetStream drops a repeated
            # rejection of one id (its Nats-Msg-Id), so each id is answered once
            asked = [request_id_of(body) for subj, _, body in sent if subj in ANSWERED and subj not in UPGRADER_ANSWERED]
            assert len(asked) == 2 * len([b for b in sent if b[0] == INSTALL_CLUSTER])
            asked_upgrade = [request_id_of(body) for subj, _, body in sent if subj in UPGRADER_ANSWERED]
            assert asked_upgrade

            def missing() -> list[str]:
                got = {(e.data.get("subject"), e.data.get("payloadB64")) for e in watch.seen if e.subject.startswith(DEADLETTER)}
                return sorted(f"{key[0]} {name}" for key, name in expected.items() if key not in got)

            def unanswered() -> list[str | None]:
                ids = [e.data.get("requestId") for e in watch.seen if e.subject == CLUSTER_REJECTED]
                up = [e.data.get("requestId") or None for e in watch.seen if e.subject in (UPGRADE_REJECTED, RESTORE_REJECTED, APPLY_REJECTED)]
                return ([None] * (asked.count(None) - ids.count(None)) + sorted(set(asked) - set(ids) - {None})
                        + [None] * (asked_upgrade.count(None) - up.count(None))
                        + sorted(f"upgrade {i}" for i in set(asked_upgrade) - set(up) - {None}))

            deadline = asyncio.get_running_loop().time() + 90
            while (missing() or unanswered()) and asyncio.get_running_loop().time() < deadline:
                await watch.wait_more(len(watch.seen), timeout=1.0)  # wait on events, under a deadline
            assert missing() == [] and unanswered() == [], (missing()[:60], unanswered())
            reasons = [e.data["reason"] for e in watch.seen if e.subject.startswith(DEADLETTER) and
                       (e.data.get("subject"), e.data.get("payloadB64")) in expected]
            assert all(r.startswith("MalformedMessage: malformed ") for r in reasons), [r[:200] for r in reasons][:5]
            assert any(f"[payload truncated: first {MAX_DEADLETTER_PAYLOAD} of " in r for r in reasons)

            # requests (core NATS) are answered with the fields that are wrong; heartbeats are advisory
            for ch in CHANNELS:
                # the five services' requests: the renewer (an agent's own JWT renewal) runs only on an
                # authenticated bus, not in this open-bus lab
                if ch.kind == "request" and set(ch.receivers) & set(SERVICES):
                    subjects = [ch.subject.format(service=s) for s in SERVICES] if "{service}" in ch.subject else [ch.subject]
                    for case in hostile_bodies(ch.model, valid_example(ch.model)):
                        if case.name in KINDS or case.name.startswith("wrong-type-"):
                            for subject in subjects:
                                await _check_answer(ch, subject, case, (await nc.request(subject, case.body, timeout=10)).data)
            for case in hostile_bodies(AgentHeartbeat, valid_example(AgentHeartbeat)):
                await nc.publish(f"bke.v1.heartbeat.{CLUSTER}.n0", case.body)
            await nc.flush()

            # every service is the process it was, and still serves: a valid install finishes
            assert {n: pid_alive(p) for n, p in pids.items()} == dict.fromkeys(SERVICES, True)
            assert sup.pids()["services"] == pids
            nodes = 4
            spec = synth_spec_text(nodes, name="after-hostile", key_algorithm="ECDSA-P256")
            base = AgentSettings(cluster="after-hostile", node="n0", backend="host", nats_url=nats_url, heartbeat_s=0)
            # signed commands: the agents trust the deployment's key (the one the dispatcher
            # loads, encrypted with the lab's `signing` key) and are provisioned before they register
            command_key = parse_public_line(ensure_lab_command_key(info, sup.workdir))
            fleet = Fleet.null(nc, js, base, [f"n{i}" for i in range(nodes)], command_key=command_key)
            await asyncio.gather(*(provision_agent(nc, ProvisionAgent(
                cluster="after-hostile", node=node, agent_id=ident.agent_id, seal_public_key_b64=ident.public_key_b64))
                for node, ident in fleet.identities().items()))
            await fleet.start()
            try:
                async with EventWatch(nc, ["bke.v1.install.after-hostile.finished"]) as done:
                    rid = str(uuid.uuid4())
                    await js.publish(INSTALL_CLUSTER, InstallCluster(request_id=rid, spec=spec).to_bytes())
                    finished = await done.wait_for(lambda e: True, timeout=120)
            finally:
                await fleet.stop(grace=1.0)
            assert finished.data["status"] == "Succeeded", json.dumps(finished.data)[:500]
            assert {n: pid_alive(p) for n, p in pids.items()} == dict.fromkeys(SERVICES, True)
    finally:
        await nc.close()
