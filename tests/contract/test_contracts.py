"""Contract tests: the committed AsyncAPI matches the code; messages round-trip; strictness."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from bke.contracts import CHANNELS, ClusterRejected, InstallCluster, ErrorItem, PlanCreated
from bke.contracts.agent import AgentCommand, agent_subject, node_token, token_node
from bke.contracts.agent_steps import WriteFile
from bke.contracts.asyncapi import render_asyncapi
from bke.adapters.bus.streams import STREAMS


def test_asyncapi_document_is_current():
    committed = Path("docs/asyncapi.yaml").read_text()
    assert committed == render_asyncapi(), "regenerate: python -m bke.contracts.asyncapi > docs/asyncapi.yaml"


def test_every_subject_is_versioned_and_in_exactly_one_stream_or_core():
    for ch in CHANNELS:
        assert ch.subject.startswith("bke.v1."), ch.subject
    for a in STREAMS:
        for b in STREAMS:
            if a.name < b.name:
                assert not set(a.subjects) & set(b.subjects)


def test_round_trip_and_camel_case_wire_format():
    req = InstallCluster(request_id="r1", spec="x")
    assert req.to_bytes() == b'{"requestId":"r1","spec":"x","specRef":null}'
    assert InstallCluster.model_validate_json(req.to_bytes()) == req
    rej = ClusterRejected(request_id="r1", cluster=None, errors=[ErrorItem(path="a", message="b")])
    assert ClusterRejected.model_validate_json(rej.to_bytes()) == rej
    ev = PlanCreated(request_id="r", cluster="c", plan_key="k", plan_digest="d", nodes=1, etcd_clusters=["etcd-data"])
    assert b'"planKey":"k"' in ev.to_bytes()


def test_messages_are_strict():
    with pytest.raises(ValidationError):
        InstallCluster.model_validate({"requestId": "r", "spec": "x", "surprise": 1})
    with pytest.raises(ValidationError):
        InstallCluster.model_validate({"requestId": "r", "spec": "x", "specRef": "b/k"})
    with pytest.raises(ValidationError):
        InstallCluster.model_validate({"requestId": "r", "specRef": "nobucket"})


def test_agent_command_steps_discriminated_and_subjects():
    cmd = AgentCommand.model_validate(
        {
            "commandId": "c1",
            "cluster": "c",
            "node": "n.example",
            "phase": "certs",
            "issuedAt": "2026-01-01T00:00:00Z",
            "steps": [{"type": "write_file", "id": "s1", "path": "/etc/x", "contentB64": "eA==", "sha256": "0"}],
        }
    )
    assert isinstance(cmd.steps[0], WriteFile) and cmd.steps[0].mode == 0o644
    assert agent_subject("c", "n.example", "command") == "bke.v1.agent.c.n_example.command"
    assert token_node(node_token("a.b-c")) == "a.b-c"
    with pytest.raises(ValidationError):
        AgentCommand.model_validate({**cmd.model_dump(by_alias=True), "steps": [{"type": "shell", "id": "x"}]})


def test_status_schema_document_is_current_and_the_reply_is_versioned():
    from bke.contracts.status import ClusterStatus, StatusError, GetStatus, parse_status_reply
    from bke.contracts.status_schema import render_status_schema

    committed = Path("docs/status.schema.json").read_text()
    assert committed == render_status_schema(), "regenerate: python -m bke.contracts.status_schema > docs/status.schema.json"
    schema = json.loads(committed)
    assert schema["properties"]["apiVersion"]["const"] == "bke.v1/ClusterStatus" and schema["additionalProperties"] is False
    missing = parse_status_reply(StatusError(reason="NotFound", cluster="x", message="no install").to_bytes())
    assert isinstance(missing, StatusError) and missing.reason == "NotFound"
    with pytest.raises(ValidationError):  # an unknown version is refused, not guessed at
        parse_status_reply(b'{"apiVersion": "bke.v2/ClusterStatus", "cluster": "x"}')
    with pytest.raises(ValidationError):
        GetStatus.model_validate({"cluster": "x", "limit": 100_000})
    with pytest.raises(ValidationError):
        ClusterStatus.model_validate({"apiVersion": "bke.v1/ClusterStatus", "cluster": "x", "surprise": 1})
