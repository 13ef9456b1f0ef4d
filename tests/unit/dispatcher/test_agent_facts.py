"""One host's facts as the dispatcher answers them (bke_dispatcher.wiring.reads.host_facts): what
the heartbeats recorded, nothing for a value that does not read as what is written there, and
Unavailable, not an error, while the state is lost."""
from __future__ import annotations

from datetime import datetime, timezone

from bke.adapters.state.epoch import StateLost
from bke.contracts.agent import AgentRuntime
from bke.contracts.agent_facts import GetAgentFacts, HostFacts
from bke.contracts.status import StatusError
from bke_dispatcher.wiring.reads import AgentFactsReader, host_facts

RUNTIME = AgentRuntime(agent_version="1.2.3", python="3.11", machine="x86_64")
AT = "2026-01-02T03:04:05+00:00"
WHEN = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


def test_recorded_values_are_answered_as_they_were_reported() -> None:
    got = host_facts("n1", AT.encode(), b"1", RUNTIME.model_dump_json(by_alias=True).encode())
    assert got == HostFacts(hostname="n1", last_heartbeat=WHEN, cgroup_version=1, runtime=RUNTIME)
    assert host_facts("n1", AT, "2", None).cgroup_version == 2  # a client with str responses reads the same


def test_nothing_recorded_or_nothing_readable_is_not_known() -> None:
    assert host_facts("n2", None, None, None) == HostFacts(hostname="n2")
    for at in ("t1", "2026-01-02T03:04:05", AT + " " * 64):  # not a time; no zone to compare with; too long
        assert host_facts("n2", at, "3", '{"agentVersion": "x"}') == HostFacts(hostname="n2")


async def test_while_the_state_is_lost_the_answer_is_unavailable_not_an_error() -> None:
    def lost() -> None:
        raise StateLost("the epoch changed")

    reply = await AgentFactsReader(None, guard=lost).answer(GetAgentFacts(cluster="c1", hosts=["n1"]))  # type: ignore[arg-type]
    assert isinstance(reply, StatusError) and reply.reason == "Unavailable" and "the epoch changed" in reply.message
