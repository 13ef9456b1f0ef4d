"""The agents the certs service accepted, as the dispatcher records them (service_events, on a
real Redis): the events handled in one turn are written together, each node's agent is the one
its event named, a node named twice in a turn keeps the later one, and each event wakes the
install."""
from __future__ import annotations

import asyncio
from datetime import datetime, timezone

import pytest
from redis import asyncio as aioredis

from bke.adapters.state import PlanCache
from bke.contracts.agent import AgentAccepted
from bke_dispatcher.service_events import ServiceEvents
from bke_dispatcher.state import DispatcherState

pytestmark = pytest.mark.integration
C = "acc"
NOW = datetime(2026, 1, 2, tzinfo=timezone.utc)


async def test_a_turns_accepted_agents_are_recorded_together_the_last_word_per_node(redis_client: aioredis.Redis) -> None:
    state = DispatcherState(redis_client)
    kicks: list[str] = []
    events = ServiceEvents(state, PlanCache(redis_client), None, lambda c, at_once=False: kicks.append(c),  # type: ignore[arg-type]
                           lambda: NOW)
    accepted = [AgentAccepted(cluster=C, node=f"n{i}", agent_id=f"a{i}", at=NOW.isoformat()) for i in range(300)]
    accepted.append(AgentAccepted(cluster=C, node="n7", agent_id="a7-new", at=NOW.isoformat()))  # re-registered
    await asyncio.gather(*(events.agent_accepted(ev) for ev in accepted))
    got = {f"n{i}": await state.accepted_agent(C, f"n{i}") for i in range(300)}
    assert got == {**{f"n{i}": f"a{i}" for i in range(300)}, "n7": "a7-new"}
    assert kicks == [C] * len(accepted)
    await events.agent_accepted(AgentAccepted(cluster=C, node="n7", agent_id="a7-third", at=NOW.isoformat()))
    assert await state.accepted_agent(C, "n7") == "a7-third"  # alone in its turn, written as well
