"""The permissions table against the channels it is derived from, so that the two cannot drift."""
from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from bke.adapters.auth.authority import new_authority
from bke.adapters.auth.jetstream_grants import BUCKET_ACCESS, MESSAGE_READERS, SERVICE_CONSUMERS
from bke.adapters.auth.jwt import decode_jwt
from bke.adapters.bus.quotas import AGENT_MAX_PAYLOAD, AGENT_MAX_SUBS, PER_CLUSTER, storage_for
from bke.adapters.bus.streams import BUCKETS, STREAMS
from bke.adapters.auth.permissions import (
    RESPONSE_TTL_S,
    ROLES,
    SERVICE_ROLES,
    agent_permissions,
    identity_name,
    inbox_prefix,
    role_permissions,
)
from bke.adapters.auth.creds import subject_matches as _matches  # NATS matching: `*` one token, `>` the rest
from bke.contracts.agent import AGENTS_PROVISION, agent_subject
from bke.contracts.identity import renew_identity_subject
from bke.contracts.subjects import CHANNELS
from bke.core.secrets.at_rest import create_key_file


def _concrete(subject: str, component: str) -> str:
    return re.sub(r"\{[a-z]+\}", "x", subject.replace("{service}", component))


@pytest.mark.parametrize("role", [*SERVICE_ROLES, "operator", "renewer"])
def test_every_channel_a_component_sends_is_allowed_and_no_other(role: str) -> None:
    component = ROLES[role].component
    perms = role_permissions(role)
    bus_allow = [p for p in perms.pub_allow if p.startswith("bke.")]
    for ch in CHANNELS:
        subject = _concrete(ch.subject, component)
        allowed = any(_matches(p, subject) for p in bus_allow)
        # the role's documented extras (health requests from operators' tools) and nothing else
        extra = any(_matches(p, subject) for p in ROLES[role].extra_pub)
        assert allowed == (component in ch.senders or extra), (role, ch.subject)


@pytest.mark.parametrize("role", [*SERVICE_ROLES, "operator", "renewer"])
def test_every_channel_a_component_receives_is_subscribable(role: str) -> None:
    component = ROLES[role].component
    perms = role_permissions(role)
    for ch in CHANNELS:
        if component in ch.receivers:
            assert any(_matches(p, _concrete(ch.subject, component)) for p in perms.sub_allow), (role, ch.subject)


def test_only_the_dispatcher_may_publish_agent_commands_or_hear_agent_results() -> None:
    # the upgrader's node commands go through the dispatcher (bke.contracts.node_commands)
    command = agent_subject("c1", "n1", "command")
    results = [agent_subject("c1", "n1", k) for k in ("result", "upgrader-result")]
    for role in [*SERVICE_ROLES, "operator", "dashboard"]:
        perms = role_permissions(role)
        assert any(_matches(p, command) for p in perms.pub_allow) == (role == "dispatcher"), role
    for role in SERVICE_ROLES:
        perms = role_permissions(role)
        heard = [c for c in SERVICE_CONSUMERS[role] if any(_matches(c.filter, r) for r in results)]
        assert bool(heard) == (role == "dispatcher"), (role, heard)


def test_the_agent_is_confined_to_its_own_node() -> None:
    perms = agent_permissions("c1", "n1")
    own = {k: agent_subject("c1", "n1", k) for k in ("result", "registered", "heartbeat")}
    other = {k: agent_subject("c1", "n2", k) for k in ("result", "registered", "heartbeat", "command")}
    assert all(any(_matches(p, s) for p in perms.pub_allow) for s in own.values())
    assert not any(_matches(p, s) for p in perms.pub_allow for s in other.values())
    assert not any(_matches(p, other["command"]) for p in perms.sub_allow)
    assert not any(_matches(p, "_INBOX.x") for p in perms.sub_allow)
    # its own identity's renewal, never another node's
    assert any(_matches(p, renew_identity_subject("c1", "n1")) for p in perms.pub_allow)
    assert not any(_matches(p, renew_identity_subject("c1", "n2")) for p in perms.pub_allow)
    for bad in ("$JS.API.CONSUMER.CREATE.BKE_AGENT", "$JS.API.CONSUMER.DURABLE.CREATE.BKE_AGENT.agent__c1__n1",
                "$JS.API.STREAM.MSG.GET.BKE_AGENT", "$JS.API.DIRECT.GET.BKE_AGENT"):
        assert not any(_matches(p, bad) for p in perms.pub_allow), bad
        assert any(_matches(p, bad) for p in perms.pub_deny), bad


@pytest.mark.parametrize("role", [*SERVICE_ROLES, "operator", "dashboard"])
def test_no_service_reads_or_acks_agent_commands(role: str) -> None:
    perms = role_permissions(role)
    for subject in ("$JS.API.CONSUMER.CREATE.BKE_AGENT.agent__c1__n1.bke.v1.agent.c1.n1.command",
                    "$JS.API.CONSUMER.CREATE.BKE_AGENT.x.bke.v1.agent.>",
                    "$JS.API.CONSUMER.CREATE.BKE_AGENT", "$JS.API.CONSUMER.DURABLE.CREATE.BKE_AGENT.x",
                    "$JS.API.STREAM.MSG.GET.BKE_AGENT", "$JS.API.DIRECT.GET.BKE_AGENT",
                    "$JS.API.DIRECT.GET.BKE_AGENT.bke.v1.agent.c1.n1.command",
                    "$JS.API.CONSUMER.MSG.NEXT.BKE_AGENT.agent__c1__n1", "$JS.API.CONSUMER.DELETE.BKE_AGENT.agent__c1__n1",
                    "$JS.ACK.BKE_AGENT.agent__c1__n1.1.2.3.4.5"):
        assert not any(_matches(p, subject) for p in perms.pub_allow), (role, subject)


def _service_consumers(service: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, str]]:
    """The (stream, durable, filter) of every consumer the service wires (built, never started)."""
    key = tmp_path / "secret.key"
    if not key.exists():
        create_key_file(key)
    monkeypatch.setenv("BKE_SECRET_KEY_FILE", str(key))
    app = importlib.import_module(f"bke_{service}.app")
    settings = getattr(importlib.import_module(f"bke_{service}.settings"), f"{service.capitalize()}Settings")
    svc = app.create_service(settings(nats_url="nats://127.0.0.1:1", redis_url="redis://127.0.0.1:1/0"))
    return sorted(svc.consumers)


@pytest.mark.parametrize("service", SERVICE_ROLES)
def test_the_consumers_table_is_exactly_what_each_service_wires(service: str, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    table = sorted((c.stream, c.durable, c.filter) for c in SERVICE_CONSUMERS[service])
    assert _service_consumers(service, tmp_path, monkeypatch) == table


@pytest.mark.parametrize("role", [*SERVICE_ROLES, "operator", "dashboard"])
def test_no_identity_but_the_deploy_one_may_create_update_or_delete_a_stream(role: str) -> None:
    perms = role_permissions(role)
    for stream in ("BKE_AGENT", "BKE_EVENTS", "BKE_COMMANDS", "BKE_DEADLETTER", "OBJ_bke-blobs", "OBJ_bke-etcd-snapshots", "X"):
        for verb in ("CREATE", "UPDATE", "DELETE", "PURGE", "SNAPSHOT", "RESTORE", "MSG.DELETE"):
            subject = f"$JS.API.STREAM.{verb}.{stream}"
            if role == "operator" and verb == "PURGE" and stream == "OBJ_bke-blobs":
                continue  # the blob bucket's writer replaces an object's old chunks
            assert not any(_matches(p, subject) for p in perms.pub_allow), (role, subject)
    for subject in ("$JS.API.ACCOUNT.PURGE.x", "$JS.API.META.LEADER.STEPDOWN", "$JS.API.SERVER.REMOVE",
                    "$JS.API.STREAM.LEADER.STEPDOWN.BKE_AGENT", "$JS.API.CONSUMER.DELETE.BKE_EVENTS.certs-plans"):
        assert not any(_matches(p, subject) for p in perms.pub_allow), (role, subject)


def test_the_deploy_identity_declares_streams_and_nothing_else() -> None:
    perms = role_permissions("streams")
    for verb in ("INFO", "CREATE", "UPDATE"):
        for stream in ("BKE_AGENT", "BKE_EVENTS", "OBJ_bke-etcd-snapshots"):
            assert any(_matches(p, f"$JS.API.STREAM.{verb}.{stream}") for p in perms.pub_allow), (verb, stream)
    for subject in ("$JS.API.STREAM.DELETE.BKE_AGENT", "$JS.API.STREAM.PURGE.BKE_AGENT", "$JS.API.STREAM.CREATE.OTHER",
                    "$JS.API.CONSUMER.CREATE.BKE_AGENT", "$JS.API.STREAM.MSG.GET.BKE_AGENT", "bke.v1.cluster.install",
                    agent_subject("c1", "n1", "command"), "$O.bke-etcd-snapshots.M.x"):
        assert not any(_matches(p, subject) for p in perms.pub_allow), subject
    assert perms.sub_allow == (f"{inbox_prefix('streams')}.>",) and not perms.responses


@pytest.mark.parametrize("service", SERVICE_ROLES)
def test_a_service_uses_its_own_consumers_and_nobody_elses(service: str) -> None:
    perms = role_permissions(service)
    for c in SERVICE_CONSUMERS[service]:
        for subject in (f"$JS.API.CONSUMER.CREATE.{c.stream}.{c.durable}.{c.filter}", f"$JS.API.CONSUMER.INFO.{c.stream}.{c.durable}",
                        f"$JS.API.CONSUMER.MSG.NEXT.{c.stream}.{c.durable}", f"$JS.ACK.{c.stream}.{c.durable}.1.2.3.4.5"):
            assert any(_matches(p, subject) for p in perms.pub_allow), subject
        # its own durable with another filter: refused (the server checks the subject's filter)
        assert not any(_matches(p, f"$JS.API.CONSUMER.CREATE.{c.stream}.{c.durable}.bke.v1.agent.c1.n1.command")
                       for p in perms.pub_allow), c
    for other, consumers in SERVICE_CONSUMERS.items():
        if other == service:
            continue
        for c in consumers:
            if any(c.durable == own.durable for own in SERVICE_CONSUMERS[service]):
                continue
            for subject in (f"$JS.API.CONSUMER.CREATE.{c.stream}.{c.durable}.{c.filter}",
                            f"$JS.API.CONSUMER.MSG.NEXT.{c.stream}.{c.durable}", f"$JS.ACK.{c.stream}.{c.durable}.1.2.3.4.5"):
                assert not any(_matches(p, subject) for p in perms.pub_allow), (service, subject)
    for subject in ("$JS.API.CONSUMER.CREATE.BKE_EVENTS", "$JS.API.CONSUMER.DURABLE.CREATE.BKE_EVENTS.x",
                    "$JS.API.STREAM.MSG.GET.BKE_EVENTS", "$JS.API.DIRECT.GET.BKE_AGENT.bke.v1.agent.c1.n1.command"):
        assert not any(_matches(p, subject) for p in perms.pub_allow), (service, subject)


@pytest.mark.parametrize("role", [*SERVICE_ROLES, "dashboard", "streams"])
def test_only_a_buckets_writers_publish_into_it(role: str) -> None:
    """A publish into an object bucket can carry `Nats-Rollup: all` and empty it: only its writers."""
    perms = role_permissions(role)
    for bucket, access in BUCKET_ACCESS.items():
        assert any(_matches(p, f"$O.{bucket}.M.eA") for p in perms.pub_allow) == (role in access.writers), (role, bucket)


def test_the_operator_writes_the_blob_bucket_and_reads_the_snapshots() -> None:
    perms = role_permissions("operator")
    assert any(_matches(p, "$O.bke-blobs.C.x") for p in perms.pub_allow)
    assert not any(_matches(p, "$O.bke-etcd-snapshots.M.eA") for p in perms.pub_allow)
    assert any(_matches(p, "$JS.API.DIRECT.GET.OBJ_bke-etcd-snapshots.$O.bke-etcd-snapshots.M.eA") for p in perms.pub_allow)


DEADLETTER_GET = "$JS.API.STREAM.MSG.GET.BKE_DEADLETTER"


def test_only_the_operator_reads_the_dead_letters() -> None:
    """`bke deadletters`: the operator's message get on BKE_DEADLETTER, exactly that subject; no
    dashboard, service, deploy identity or agent reads what a service gave up on."""
    assert MESSAGE_READERS == {"BKE_DEADLETTER": ("operator",)}
    operator = role_permissions("operator").pub_allow
    assert DEADLETTER_GET in operator
    assert [p for p in operator if ".MSG.GET." in p and not p.startswith("$JS.API.STREAM.MSG.GET.OBJ_")] == [DEADLETTER_GET]
    for role in [*SERVICE_ROLES, "dashboard", "streams"]:
        assert not any(_matches(p, DEADLETTER_GET) for p in role_permissions(role).pub_allow), role
    agent = agent_permissions("c1", "n1")
    assert not any(_matches(p, DEADLETTER_GET) for p in agent.pub_allow)
    assert any(_matches(p, DEADLETTER_GET) for p in agent.pub_deny)


def test_replies_are_bounded_in_number_and_time() -> None:
    claims = role_permissions("dispatcher").claims()
    assert claims["resp"] == {"max": 1, "ttl": RESPONSE_TTL_S * 1_000_000_000}
    assert "resp" not in role_permissions("operator").claims()
    assert role_permissions("renewer").claims()["resp"] == claims["resp"]


def test_the_renewer_hears_renewal_requests_and_only_answers() -> None:
    """It publishes nothing (its allow list names only a subject of its own inbox: an empty list
    would allow everything) and answers through `resp`; nobody else hears the requests."""
    perms = role_permissions("renewer")
    assert perms.pub_allow == ("_INBOX_renewer.none",) and perms.responses
    assert perms.sub_allow == ("bke.v1.agents.*.*.renew-identity", f"{inbox_prefix('renewer')}.>")
    for subject in (agent_subject("c1", "n1", "command"), AGENTS_PROVISION, "_INBOX_agent__c1__n1.x"):
        assert not any(_matches(p, subject) for p in perms.pub_allow), subject
    request = renew_identity_subject("c1", "n1")
    for role in [*SERVICE_ROLES, "operator", "dashboard", "streams"]:
        assert not any(_matches(p, request) for p in role_permissions(role).sub_allow), role
        assert not any(_matches(p, request) for p in role_permissions(role).pub_allow), role


def test_dashboard_publishes_only_the_requests_that_change_nothing() -> None:
    perms = role_permissions("dashboard")
    reads = {c.subject for c in CHANNELS if c.kind == "request" and c.reads and "cli" in c.senders}
    health = {c.subject.replace("{service}", "*") for c in CHANNELS if c.subject.startswith("bke.v1.health.")}
    assert {p for p in perms.pub_allow if p.startswith("bke.")} == reads | health
    for subject in (AGENTS_PROVISION, "bke.v1.cluster.install", "bke.v1.certs.renew", agent_subject("c1", "n1", "command")):
        assert not any(_matches(p, subject) for p in perms.pub_allow), subject
    # its JetStream: reads only
    assert all(".INFO" in p or p.endswith(".STREAM.NAMES") for p in perms.pub_allow if p.startswith("$JS")), perms.pub_allow


def test_inbox_prefixes_are_one_token_and_distinct() -> None:
    a, b = inbox_prefix(identity_name("agent", "c1", "n1")), inbox_prefix(identity_name("agent", "c1", "n10"))
    assert "." not in a and a != b and not _matches(f"{a}.>", f"{b}.x")
    assert identity_name("agent", "c1", "w1.example.com") == "agent.c1.w1_example_com"
    with pytest.raises(ValueError):
        identity_name("root")
    with pytest.raises(ValueError):
        identity_name("agent", "c1")


def test_the_dispatcher_may_subscribe_every_heartbeat_as_its_code_does() -> None:
    assert "bke.v1.heartbeat.>" in role_permissions("dispatcher").sub_allow
    assert "bke.v1.heartbeat.>" not in role_permissions("planner").sub_allow


def test_an_agents_jwt_limits_its_payload_and_subscriptions() -> None:
    perms = agent_permissions("c1", "n1")
    assert (perms.payload, perms.subs) == (AGENT_MAX_PAYLOAD, AGENT_MAX_SUBS)
    user = new_authority().user("agent.c1.n1", perms, iat=1)
    claims = decode_jwt(user.jwt)["nats"]
    assert (claims["payload"], claims["subs"]) == (AGENT_MAX_PAYLOAD, AGENT_MAX_SUBS)
    service = decode_jwt(new_authority().user("planner", role_permissions("planner"), iat=1).jwt)["nats"]
    assert (service["payload"], service["subs"]) == (-1, -1)


def test_every_stream_and_bucket_is_sized_per_cluster() -> None:
    names = [*(d.name for d in STREAMS), *(f"OBJ_{b}" for b, _ in BUCKETS)]
    assert sorted(PER_CLUSTER) == sorted(names)
    for d in STREAMS:
        assert d.config(clusters=3).max_bytes == 3 * PER_CLUSTER[d.name] > 0
    assert storage_for(2) == 2 * sum(PER_CLUSTER.values())
