"""The permissions table against the channels it is derived from, so that the two cannot drift."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from bke.auth.permissions import (
    AGENT_STREAM_CONSUMERS,
    ROLES,
    SERVICE_ROLES,
    agent_permissions,
    identity_name,
    inbox_prefix,
    role_permissions,
)
from bke.auth.creds import subject_matches as _matches  # NATS matching: `*` one token, `>` the rest
from bke.contracts.agent import agent_subject
from bke.contracts.subjects import CHANNELS


def _concrete(subject: str, component: str) -> str:
    return re.sub(r"\{[a-z]+\}", "x", subject.replace("{service}", component))


@pytest.mark.parametrize("role", [*SERVICE_ROLES, "operator"])
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


@pytest.mark.parametrize("role", [*SERVICE_ROLES, "operator"])
def test_every_channel_a_component_receives_is_subscribable(role: str) -> None:
    component = ROLES[role].component
    perms = role_permissions(role)
    for ch in CHANNELS:
        if component in ch.receivers:
            assert any(_matches(p, _concrete(ch.subject, component)) for p in perms.sub_allow), (role, ch.subject)


def test_only_the_dispatcher_and_the_upgrader_may_publish_agent_commands() -> None:
    command = agent_subject("c1", "n1", "command")
    for role in [*SERVICE_ROLES, "operator", "dashboard"]:
        perms = role_permissions(role)
        assert any(_matches(p, command) for p in perms.pub_allow) == (role in ("dispatcher", "upgrader")), role


def test_the_agent_is_confined_to_its_own_node() -> None:
    perms = agent_permissions("c1", "n1")
    own = {k: agent_subject("c1", "n1", k) for k in ("result", "registered", "heartbeat")}
    other = {k: agent_subject("c1", "n2", k) for k in ("result", "registered", "heartbeat", "command")}
    assert all(any(_matches(p, s) for p in perms.pub_allow) for s in own.values())
    assert not any(_matches(p, s) for p in perms.pub_allow for s in other.values())
    assert not any(_matches(p, other["command"]) for p in perms.sub_allow)
    assert not any(_matches(p, "_INBOX.x") for p in perms.sub_allow)
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


def test_agent_stream_consumers_match_the_services_code() -> None:
    """Every `fast_subscriber/work_subscriber(subject, "BKE_AGENT", durable)` of a service is in
    AGENT_STREAM_CONSUMERS with the same filter, and nothing else is."""
    root = Path(__file__).resolve().parents[2] / "services"
    call = re.compile(r'_subscriber\(\s*"([^"]+)",\s*"BKE_AGENT",\s*"([^"]+)"')
    found = {svc: tuple((d, f) for f, d in call.findall((root / svc / f"bke_{svc}" / "app.py").read_text()))
             for svc in SERVICE_ROLES}
    assert {k: v for k, v in found.items() if v} == AGENT_STREAM_CONSUMERS


def test_services_may_declare_streams_and_use_their_own_agent_stream_consumers() -> None:
    perms = role_permissions("dispatcher")
    for subject in ("$JS.API.STREAM.INFO.BKE_AGENT", "$JS.API.STREAM.CREATE.BKE_EVENTS",
                    "$JS.API.CONSUMER.CREATE.BKE_AGENT.dispatcher-results.bke.v1.agent.*.*.result",
                    "$JS.API.CONSUMER.MSG.NEXT.BKE_AGENT.dispatcher-results", "$JS.ACK.BKE_AGENT.dispatcher-results.1.2.3.4.5",
                    "$JS.API.CONSUMER.DURABLE.CREATE.BKE_EVENTS.dispatcher-plans", "$JS.API.CONSUMER.MSG.NEXT.BKE_EVENTS.x",
                    "$JS.API.STREAM.MSG.GET.OBJ_bke-blobs", "$O.bke-blobs.C.x"):
        assert any(_matches(p, subject) for p in perms.pub_allow), subject


def test_dashboard_publishes_requests_only() -> None:
    perms = role_permissions("dashboard")
    requests = {c.subject for c in CHANNELS if c.kind == "request" and "cli" in c.senders}
    health = {c.subject.replace("{service}", "*") for c in CHANNELS if c.subject.startswith("bke.v1.health.")}
    assert {p for p in perms.pub_allow if p.startswith("bke.")} == requests | health


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
