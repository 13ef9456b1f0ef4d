"""The upgrader's question for the agents' facts (bke_upgrader.agent_facts): a large cluster is
asked in chunks, all in flight at once; whatever keeps the dispatcher from telling (no answer,
an Unavailable answer, an answer of another form) is one retryable error, never a crash."""
from __future__ import annotations

import asyncio

import pytest

from bke.contracts.agent_facts import AGENT_FACTS_GET, MAX_HOSTS, AgentFacts, GetAgentFacts, HostFacts
from bke.contracts.status import StatusError
from bke.core.errors import TemporaryError
from bke_upgrader.agent_facts import AgentFactsClient, AgentFactsUnavailable


async def test_a_cluster_of_thousands_is_asked_in_chunks_all_in_flight_together() -> None:
    hosts = [f"n{i}" for i in range(2 * MAX_HOSTS + 7)]
    asked: list[GetAgentFacts] = []
    all_in = asyncio.Event()

    async def dispatcher(subject: str, body: bytes, timeout: float) -> bytes:
        assert subject == AGENT_FACTS_GET and timeout == 3.0
        ask = GetAgentFacts.model_validate_json(body)
        asked.append(ask)
        if len(asked) == 3:
            all_in.set()
        await all_in.wait()  # answered only once every chunk was asked: they are side by side
        return AgentFacts(cluster="c1", hosts=[HostFacts(hostname=h, cgroup_version=2) for h in ask.hosts
                                              if h != "n3"]).to_bytes()

    got = await asyncio.wait_for(AgentFactsClient(dispatcher, 3.0).get("c1", hosts), timeout=30)
    assert [len(a.hosts) for a in asked] == [MAX_HOSTS, MAX_HOSTS, 7] and {a.cluster for a in asked} == {"c1"}
    assert list(got) == hosts  # every host asked, in order
    assert got["n3"] == HostFacts(hostname="n3")  # not in the answer: nothing known of it
    assert all(got[h].cgroup_version == 2 for h in hosts if h != "n3")
    assert await AgentFactsClient(dispatcher, 3.0).get("c1", []) == {}


async def _silent(subject: str, body: bytes, timeout: float) -> bytes:
    raise TimeoutError


async def _lost(subject: str, body: bytes, timeout: float) -> bytes:
    return StatusError(reason="Unavailable", cluster="c1", message="state lost").to_bytes()


async def _other_form(subject: str, body: bytes, timeout: float) -> bytes:
    return b'{"apiVersion": "bke.v1/AgentFacts", "cluster": "c1", "hosts": [], "newField": 1}'


@pytest.mark.parametrize(("dispatcher", "why"), [(_silent, "no answer on bke.v1.agent-facts.get: TimeoutError"),
                                                 (_lost, "answered Unavailable: state lost"),
                                                 (_other_form, "an answer that is no AgentFacts")])
async def test_no_answer_or_one_it_cannot_use_is_a_retryable_error(dispatcher, why) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(AgentFactsUnavailable, match=why) as caught:
        await AgentFactsClient(dispatcher, 1.0).get("c1", ["n1", "n2"])
    assert isinstance(caught.value, TemporaryError) and caught.value.delay > 0
