"""The pure checks behind trust: whose registration is sealed to, whose result is believed, and
a flood of dropped results logs a line per period, not a line per message."""
from __future__ import annotations

import logging

from bke.contracts.agent import AgentRegistered, ProvisionAgent, subject_node
from bke_agent import AgentIdentity
from bke_certs.sealing import provisioned_refusal
from bke_dispatcher.results import _RateLimited


def _reg(ident: AgentIdentity, node: str = "n1") -> AgentRegistered:
    return AgentRegistered(cluster="c", node=node, agent_id=ident.agent_id, seal_public_key_b64=ident.public_key_b64,
                           backend="host", version="t", at="t")


def _prov(ident: AgentIdentity, **kw: str) -> ProvisionAgent:
    base = dict(cluster="c", node="n1", agent_id=ident.agent_id, seal_public_key_b64=ident.public_key_b64)
    return ProvisionAgent(**{**base, **kw})


def test_only_the_provisioned_key_is_sealed_to() -> None:
    mine, other = AgentIdentity.ephemeral(), AgentIdentity.ephemeral()
    assert provisioned_refusal(_prov(mine), _reg(mine)) == ""
    assert "not the one provisioned" in provisioned_refusal(_prov(mine), _reg(other))
    assert "no agent key was provisioned for node n1" in provisioned_refusal(None, _reg(mine))
    # the id must be the key's: an id taken from someone else's registration does not pass
    forged = _reg(other).model_copy(update={"agent_id": mine.agent_id})
    assert "not the one provisioned" in provisioned_refusal(_prov(mine), forged)
    assert "agentId" in provisioned_refusal(_prov(mine, agent_id=other.agent_id), None)
    assert "sealPublicKeyB64" in provisioned_refusal(_prov(mine, seal_public_key_b64="AAAA"), None)


def test_the_subject_names_the_node() -> None:
    assert subject_node("bke.v1.agent.c1.n1_example_com.result") == ("c1", "n1.example.com")
    assert subject_node("bke.v1.agent.c1.n1.result.extra") is None
    assert subject_node("bke.v1.other.c1.n1.result") is None


def test_dropped_results_log_once_per_period_and_count_all(caplog) -> None:
    now = [0.0]
    limited = _RateLimited(every_s=10.0, clock=lambda: now[0])
    caplog.set_level(logging.WARNING, logger="bke.dispatcher")
    for _ in range(1000):
        limited("c1", "result dropped: x")
    now[0] = 11.0
    limited("c1", "result dropped: x")
    lines = [r.getMessage() for r in caplog.records]
    assert limited.count == 1001 and len(lines) == 2
    assert "(1 since the last such line)" in lines[0] and "(1000 since the last such line)" in lines[1]
