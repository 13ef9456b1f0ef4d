"""One request/reply helper for every service (bke.adapters.bus.responder): a typed request's
answer names the wrong field, and each service answers exactly the request channels whose
receiver it is, in the queue group the channel table names."""
from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from bke.adapters.auth.permissions import SERVICE_ROLES
from bke.adapters.bus.responder import typed_answer
from bke.contracts.agent import AgentProvisioned, ProvisionAgent
from bke.contracts.subjects import CHANNELS
from bke.core.secrets.at_rest import create_key_file


def _refused(reason: str) -> AgentProvisioned:
    return AgentProvisioned(cluster="", node="", ok=False, reason=reason)


async def _provisioned(req: ProvisionAgent) -> AgentProvisioned:
    return AgentProvisioned(cluster=req.cluster, node=req.node, ok=True)


async def test_a_typed_request_is_handed_to_its_handler_and_its_reply_sent() -> None:
    answer = typed_answer(ProvisionAgent, _provisioned, _refused)
    req = ProvisionAgent(cluster="c1", node="n1", agent_id="a1", seal_public_key_b64="k1")
    reply = AgentProvisioned.model_validate_json(await answer("bke.v1.agents.provision", req.to_bytes()))
    assert (reply.cluster, reply.node, reply.ok, reply.reason) == ("c1", "n1", True, "")


@pytest.mark.parametrize(("body", "field"), [
    (b'{"node": "n1", "agentId": "a1", "sealPublicKeyB64": "k1"}', "cluster"),
    (b'{"cluster": "c1", "node": "", "agentId": "a1", "sealPublicKeyB64": "k1"}', "node"),
    (b'{"cluster": "c1", "node": "n1", "agentId": "a1", "sealPublicKeyB64": "k1", "extra": 1}', "extra"),
    (b"not json", "request"),
])
async def test_a_request_that_is_no_message_of_the_contract_is_answered_naming_the_field(body: bytes,
                                                                                         field: str) -> None:
    answer = typed_answer(ProvisionAgent, _provisioned, _refused)
    reply = AgentProvisioned.model_validate_json(await answer("bke.v1.agents.provision", body))
    assert not reply.ok
    assert reply.reason.startswith(f"{field}: "), reply.reason


def _served(service: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """The (subject, queue) of every request the service answers (built, never started)."""
    key = tmp_path / "secret.key"
    if not key.exists():
        create_key_file(key)
    monkeypatch.setenv("BKE_SECRET_KEY_FILE", str(key))
    app = importlib.import_module(f"bke_{service}.app")
    settings = getattr(importlib.import_module(f"bke_{service}.settings"), f"{service.capitalize()}Settings")
    svc = app.create_service(settings(nats_url="nats://127.0.0.1:1", redis_url="redis://127.0.0.1:1/0"))
    return sorted(svc.requests)


def _wild(subject: str) -> str:
    return re.sub(r"\{[a-z]+\}", "*", subject)


@pytest.mark.parametrize("service", SERVICE_ROLES)
def test_each_service_answers_exactly_its_request_channels_through_the_responder(
        service: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the health request is the service frame's own: every replica answers it, no queue group
    expected = sorted(_wild(ch.subject) for ch in CHANNELS
                      if ch.kind == "request" and service in ch.receivers and "{service}" not in ch.subject)
    served = _served(service, tmp_path, monkeypatch)
    assert sorted(subject for subject, _ in served) == expected
    summaries = {_wild(ch.subject): ch.summary for ch in CHANNELS}
    for subject, queue in served:
        named = re.search(r"queue group ([a-z-]+)", summaries[subject])
        if named is not None:  # the channel table says which queue group answers: the code's
            assert queue == named.group(1), subject
