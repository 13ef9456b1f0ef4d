"""`settle` never counts an outage of the store as a failed delivery, and bounds the tries of a
message that can never succeed."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

import nats.errors
import pytest
import redis.exceptions

from bke.adapters.bus.delivery import settle
from bke.adapters.bus.readiness import Readiness
from bke.core.errors import NotYetKnown, Unavailable, UnknownTarget, is_unavailable


class _Msg:
    def __init__(self, delivered: int = 1):
        self.raw_message = SimpleNamespace(subject="bke.v1.agent.c.m1.result", metadata=SimpleNamespace(num_delivered=delivered))
        self.body = b'{"cluster": "c"}'
        self.acked = 0
        self.nacks: list[float | None] = []

    async def ack(self) -> None:
        self.acked += 1

    async def nack(self, delay: float | None = None) -> None:
        self.nacks.append(delay)


class _Broker:
    def __init__(self):
        self.published: list[str] = []

    async def publish(self, payload: bytes, subject: str, stream: str | None = None,
                      headers: dict[str, str] | None = None) -> None:
        self.published.append(subject)


@pytest.mark.parametrize("exc", [
    redis.exceptions.ConnectionError("refused"), redis.exceptions.TimeoutError("slow"),
    redis.exceptions.BusyLoadingError("loading"), nats.errors.ConnectionClosedError(), nats.errors.NoServersError(),
    ConnectionRefusedError(111, "refused"), Unavailable("store"),
])
def test_outages_are_classified_as_such(exc):
    assert is_unavailable(exc)


def test_a_wrapped_outage_is_one_and_a_bug_is_not():
    try:
        try:
            raise redis.exceptions.ConnectionError("down")
        except redis.exceptions.ConnectionError as inner:
            raise RuntimeError("while counting") from inner
    except RuntimeError as outer:
        assert is_unavailable(outer)
    assert not is_unavailable(RuntimeError("a bug"))
    assert not is_unavailable(redis.exceptions.ResponseError("WRONGTYPE"))


async def test_an_outage_holds_the_message_until_the_store_answers_and_counts_nothing():
    calls = 0
    ready = Readiness("dispatcher", ("nats", "streams"))

    async def work(body: bytes) -> None:
        nonlocal calls
        calls += 1
        if calls < 4:
            assert calls == 1 or not ready.ok("redis")  # not ready while held
            raise redis.exceptions.ConnectionError("Connection refused")

    msg, broker = _Msg(delivered=5), _Broker()  # even on the "last" delivery: an outage is never a failure
    await asyncio.wait_for(settle(msg, work, broker=broker, service="dispatcher", max_deliver=5, readiness=ready), 30)
    assert calls == 4 and msg.acked == 1 and msg.nacks == [] and broker.published == []
    assert ready.ok("redis")


async def test_a_message_for_an_unknown_target_is_dead_lettered_at_once_with_its_reason():
    async def work(body: bytes) -> None:
        raise UnknownTarget("result for unknown cluster 'ghost'")

    msg, broker = _Msg(delivered=1), _Broker()
    await settle(msg, work, broker=broker, service="dispatcher", max_deliver=5)
    assert msg.acked == 1 and msg.nacks == [] and broker.published == ["bke.v1.deadletter.dispatcher"]


async def test_not_yet_known_is_retried_with_growing_delays_then_dead_lettered():
    told: list[str] = []

    async def work(body: bytes) -> None:
        raise NotYetKnown("command c/etcd/m1/1 never recorded", delay=1.0, max_tries=4)

    async def give_up(body: bytes, reason: str) -> None:
        told.append(reason)

    delays = []
    for n in (1, 2, 3):
        msg, broker = _Msg(delivered=n), _Broker()
        await settle(msg, work, broker=broker, service="dispatcher", max_deliver=5, give_up=give_up)
        assert msg.acked == 0 and broker.published == []
        delays += msg.nacks
    assert delays == sorted(delays) and delays[0] < delays[-1]
    last, broker = _Msg(delivered=4), _Broker()
    await settle(last, work, broker=broker, service="dispatcher", max_deliver=5, give_up=give_up)
    assert last.acked == 1 and broker.published == ["bke.v1.deadletter.dispatcher"]
    assert told == ["NotYetKnown: command c/etcd/m1/1 never recorded"]
