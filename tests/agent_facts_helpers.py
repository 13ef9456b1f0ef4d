"""The dispatcher's answer to the agents' facts, for tests of the upgrader that play the other
services' answers: the dispatcher's own handler (bke_dispatcher.wiring.reads) over the test's
Redis, where the test writes the heartbeat keys as the dispatcher keeps them. Over the bus, the
same handler is tests/integration/test_agent_facts_bus.py's."""
from __future__ import annotations

from collections.abc import Awaitable, Callable

from redis.asyncio import Redis

from bke.contracts.agent_facts import AGENT_FACTS_GET
from bke_dispatcher.wiring.reads import agent_facts_answer

Request = Callable[[str, bytes, float], Awaitable[bytes]]  # subject, payload, timeout -> reply


def with_agent_facts(redis: Redis, others: Request | None = None) -> Request:
    """A request function: the agents' facts answered by the dispatcher's handler over `redis`,
    any other request by `others` (None: nobody answers it)."""
    answer = agent_facts_answer(redis)

    async def request(subject: str, payload: bytes, timeout: float) -> bytes:
        if subject == AGENT_FACTS_GET:
            return await answer(subject, payload)
        if others is None:
            raise TimeoutError(f"nobody answers {subject}")
        return await others(subject, payload, timeout)

    return request
