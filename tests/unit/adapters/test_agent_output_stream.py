"""The agents' two streams as declared: commands in BKE_AGENT, outputs in BKE_AGENT_OUT (interest
retention, a few messages per node subject, bounded message size, refusing new messages when
full), and the drift check that a service runs at start."""
from __future__ import annotations

from dataclasses import replace

from nats.js.api import DiscardPolicy, RetentionPolicy, StreamConfig

from bke.adapters.auth import agent_permissions, role_permissions
from bke.adapters.auth.jetstream_grants import SERVICE_CONSUMERS
from bke.adapters.bus import quotas
from bke.adapters.bus.streams import AGENT_OUTPUT_INTEREST, AGENT_OUTPUT_STREAM, AGENT_STREAM, STREAMS, stream_problems
from bke.contracts.agent import agent_subject
from bke.contracts.subjects import CHANNELS

OUT = next(d for d in STREAMS if d.name == AGENT_OUTPUT_STREAM)
COMMANDS = next(d for d in STREAMS if d.name == AGENT_STREAM)


def _matches(pattern: str, subject: str) -> bool:
    p, s = pattern.split("."), subject.split(".")
    return len(p) == len(s) and all(a in ("*", b) for a, b in zip(p, s))


def _stream_of(subject: str) -> list[str]:
    return [d.name for d in STREAMS if any(_matches(p, subject) for p in d.subjects)]


def test_a_nodes_command_and_its_outputs_sit_in_two_streams() -> None:
    assert _stream_of(agent_subject("c1", "n1", "command")) == [AGENT_STREAM]
    for kind in ("result", "upgrader-result", "registered", "refused"):
        assert _stream_of(agent_subject("c1", "n1", kind)) == [AGENT_OUTPUT_STREAM], kind
    # heartbeats are core NATS, in no stream
    assert _stream_of(agent_subject("c1", "n1", "heartbeat")) == []


def test_every_stored_agent_channel_is_in_exactly_one_agent_stream() -> None:
    for ch in CHANNELS:
        if ch.subject.startswith("bke.v1.agent.{cluster}.{node}."):
            assert len(_stream_of(ch.subject.replace("{cluster}", "c").replace("{node}", "n"))) == 1, ch.subject


def test_the_output_stream_never_drops_anothers_message_for_a_new_one() -> None:
    cfg = OUT.config(clusters=3)
    assert cfg.retention == RetentionPolicy.INTEREST and cfg.discard == DiscardPolicy.NEW
    # per subject, the node's own oldest goes (not refused): a consumer that is down for a
    # while must not stop the node's answers to the others
    assert not cfg.discard_new_per_subject
    assert cfg.max_msgs_per_subject == quotas.AGENT_OUTPUT_SUBJECT_MSGS
    assert cfg.max_msg_size == quotas.AGENT_OUTPUT_MAX_MSG <= quotas.AGENT_MAX_PAYLOAD
    assert cfg.max_bytes == 3 * quotas.PER_CLUSTER[AGENT_OUTPUT_STREAM]
    # one flooding node holds a small part of one cluster's share, on all of its output subjects
    node_most = len(OUT.subjects) * quotas.AGENT_OUTPUT_SUBJECT_MSGS * quotas.AGENT_OUTPUT_MAX_MSG
    assert 20 * node_most <= quotas.PER_CLUSTER[AGENT_OUTPUT_STREAM]


def test_the_command_stream_is_as_before_but_for_its_subjects() -> None:
    cfg = COMMANDS.config()
    assert cfg.subjects == ["bke.v1.agent.*.*.command"] and cfg.retention == RetentionPolicy.LIMITS
    assert cfg.discard == DiscardPolicy.OLD and cfg.max_msgs_per_subject == quotas.AGENT_SUBJECT_MSGS


def test_the_outputs_interest_is_every_service_consumer_on_that_stream() -> None:
    wired = sorted((c.durable, c.filter) for cs in SERVICE_CONSUMERS.values() for c in cs if c.stream == AGENT_OUTPUT_STREAM)
    assert wired == sorted(AGENT_OUTPUT_INTEREST) and OUT.interest == AGENT_OUTPUT_INTEREST
    # and none of them on the commands' stream any more
    assert not [c for cs in SERVICE_CONSUMERS.values() for c in cs if c.stream == AGENT_STREAM]


def _found(**changes: object) -> StreamConfig:
    return StreamConfig.from_response({**OUT.config().as_dict(), **changes})


def test_the_declared_output_stream_has_no_problems() -> None:
    assert stream_problems(OUT, _found()) == []
    assert stream_problems(OUT, _found(max_bytes=5 * quotas.PER_CLUSTER[AGENT_OUTPUT_STREAM]), clusters=5) == []


def test_each_drift_of_the_output_stream_is_named() -> None:
    cases = {
        "discard": _found(discard="old"),
        "per subject": _found(discard_new_per_subject=True),
        "max_msg_size": _found(max_msg_size=-1),
        "messages per subject": _found(max_msgs_per_subject=4096),
        "subjects": _found(subjects=["bke.v1.agent.>"]),
    }
    for word, found in cases.items():
        problems = stream_problems(OUT, found)
        assert problems and all(p.startswith(f"stream {AGENT_OUTPUT_STREAM}: ") for p in problems), word
        assert any(word in p for p in problems), (word, problems)
    assert any("retention" in p for p in stream_problems(OUT, _found(retention="limits")))


def test_a_deployment_of_one_agent_stream_is_drift_of_the_commands_stream() -> None:
    """What the previous release declared: every agent subject in BKE_AGENT. The service's check
    names the subjects; the deploy step narrows them (and then makes BKE_AGENT_OUT)."""
    old = StreamConfig.from_response({**COMMANDS.config().as_dict(), "subjects": ["bke.v1.agent.>"]})
    problems = stream_problems(COMMANDS, old)
    assert len(problems) == 1 and "subjects ['bke.v1.agent.>']" in problems[0]
    assert stream_problems(OUT, None) == [f"stream {AGENT_OUTPUT_STREAM}: missing"]


def test_the_other_streams_declare_what_they_did() -> None:
    for d in STREAMS:
        if d.name in (AGENT_STREAM, AGENT_OUTPUT_STREAM):
            continue
        cfg = d.config()
        assert cfg.discard == DiscardPolicy.OLD and cfg.max_msg_size == -1 and d.interest == (), d.name
        assert stream_problems(d, StreamConfig.from_response(cfg.as_dict())) == [], d.name
    assert stream_problems(replace(OUT, interest=()), _found()) == []  # interest is checked against the server


def _allowed(pattern: str, subject: str) -> bool:
    p, s = pattern.split("."), subject.split(".")
    if p[-1] == ">":
        return len(s) >= len(p) and all(a in ("*", b) for a, b in zip(p[:-1], s))
    return _matches(pattern, subject)


def test_the_deploy_identity_creates_the_outputs_consumers_and_uses_none() -> None:
    allow = role_permissions("streams").pub_allow
    for durable, filt in AGENT_OUTPUT_INTEREST:
        assert any(_allowed(p, f"$JS.API.CONSUMER.CREATE.{AGENT_OUTPUT_STREAM}.{durable}.{filt}") for p in allow), durable
        for subject in (f"$JS.API.CONSUMER.MSG.NEXT.{AGENT_OUTPUT_STREAM}.{durable}",
                        f"$JS.ACK.{AGENT_OUTPUT_STREAM}.{durable}.1.2.3.4.5",
                        f"$JS.API.CONSUMER.DELETE.{AGENT_OUTPUT_STREAM}.{durable}"):
            assert not any(_allowed(p, subject) for p in allow), subject
    for subject in (f"$JS.API.CONSUMER.CREATE.{AGENT_OUTPUT_STREAM}.x.bke.v1.agent.c1.n1.result",
                    f"$JS.API.CONSUMER.CREATE.{AGENT_STREAM}.dispatcher-results.bke.v1.agent.c1.n1.result",
                    f"$JS.API.CONSUMER.CREATE.{AGENT_OUTPUT_STREAM}"):
        assert not any(_allowed(p, subject) for p in allow), subject


def test_an_agent_publishes_its_own_outputs_only_and_touches_no_consumer_of_them() -> None:
    perms = agent_permissions("c1", "n1")
    for kind in ("result", "upgrader-result", "registered", "refused"):
        assert agent_subject("c1", "n1", kind) in perms.pub_allow
        assert not any(_allowed(p, agent_subject("c1", "n2", kind)) for p in perms.pub_allow)
    assert not [p for p in perms.pub_allow if AGENT_OUTPUT_STREAM in p]
