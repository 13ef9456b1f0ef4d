"""`publish_stored` tries again, under one message id, while no stream answers (a leader being
elected), and gives up only on what is no outage or after its deadline."""
from __future__ import annotations

import asyncio

import nats.errors
import nats.js.errors
import pytest

from bke.adapters.bus import stored_publish
from bke.adapters.bus.stored_publish import MSG_ID, publish_stored


class _Js:
    """A JetStream that fails the first publishes with the given errors, then stores."""

    def __init__(self, *errors: Exception):
        self.errors = list(errors)
        self.tries: list[dict[str, str]] = []
        self.stored: list[bytes] = []
        self.publish_tries = 0

    async def publish(self, subject, payload=b"", timeout=None, stream=None, headers=None):
        self.publish_tries += 1
        self.tries.append(dict(headers or {}))
        if self.errors:
            raise self.errors.pop(0)
        self.stored.append(payload)


class _Clock:
    def __init__(self):
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s


async def test_no_stream_answering_is_tried_again_under_one_message_id():
    js, clock = _Js(nats.js.errors.NoStreamResponseError(), nats.errors.TimeoutError()), _Clock()
    await publish_stored(js, "bke.v1.plan.created", b"m", {"bke-schema": "1"}, clock=clock, sleep=clock.sleep)
    assert js.stored == [b"m"] and len(js.tries) == 3
    ids = {t[MSG_ID] for t in js.tries}
    assert len(ids) == 1 and all(t["bke-schema"] == "1" for t in js.tries)  # a stored-but-unacked try is a duplicate
    assert clock.slept == [0.1, 0.2]  # backed off between tries


async def test_the_callers_message_id_is_kept():
    js, clock = _Js(nats.js.errors.NoStreamResponseError()), _Clock()
    await publish_stored(js, "s", b"m", {MSG_ID: "seed/etcd/m1/0"}, clock=clock, sleep=clock.sleep)
    assert [t[MSG_ID] for t in js.tries] == ["seed/etcd/m1/0"] * 2


async def test_each_call_gets_its_own_message_id():
    js, clock = _Js(), _Clock()
    for _ in range(2):
        await publish_stored(js, "s", b"m", {}, clock=clock, sleep=clock.sleep)
    assert js.tries[0][MSG_ID] != js.tries[1][MSG_ID]  # two events, never taken as duplicates


async def test_an_outage_past_the_deadline_is_raised():
    js, clock = _Js(*[nats.js.errors.NoStreamResponseError()] * 100), _Clock()
    with pytest.raises(nats.js.errors.NoStreamResponseError):
        await publish_stored(js, "s", b"m", {}, within=10.0, clock=clock, sleep=clock.sleep)
    assert not js.stored and clock.now <= 10.0 and len(js.tries) > 3


async def test_what_is_no_outage_is_raised_at_once():
    js, clock = _Js(nats.errors.Error("nats: permissions violation")), _Clock()
    with pytest.raises(nats.errors.Error):
        await publish_stored(js, "s", b"m", {}, clock=clock, sleep=clock.sleep)
    assert len(js.tries) == 1 and not clock.slept


class _AsyncJs(_Js):
    """A JetStream with publish_async: each try's PubAck is a future, answered as `acks` says in turn
    (None: never answered; an exception: that error; anything else: stored)."""

    def __init__(self, *acks: object):
        super().__init__()
        self.acks = list(acks)
        self.pending: list[asyncio.Future[None]] = []

    async def publish_async(self, subject, payload=b"", wait_stall=None, stream=None, headers=None):
        self.tries.append(dict(headers or {}))
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.pending.append(fut)
        ack = self.acks.pop(0) if self.acks else "stored"
        if isinstance(ack, Exception):
            fut.set_exception(ack)
        elif ack is not None:
            self.stored.append(payload)
            fut.set_result(None)
        return fut


async def test_a_puback_awaited_through_publish_async_is_tried_again_when_late_or_unanswered(monkeypatch):
    monkeypatch.setattr(stored_publish, "ACK_TIMEOUT_S", 0.01)  # a PubAck that never comes: the try's timeout
    js, clock = _AsyncJs(None, nats.js.errors.NoStreamResponseError()), _Clock()
    await publish_stored(js, "s", b"m", {MSG_ID: "c/node-env/n1/0"}, clock=clock, sleep=clock.sleep)
    assert js.stored == [b"m"] and [t[MSG_ID] for t in js.tries] == ["c/node-env/n1/0"] * 3
    assert js.pending[0].cancelled()  # the unanswered PubAck was given up, not left pending
    assert not js.publish_tries


async def test_what_publish_async_refuses_is_raised_at_once():
    js, clock = _AsyncJs(nats.errors.Error("nats: permissions violation")), _Clock()
    with pytest.raises(nats.errors.Error):
        await publish_stored(js, "s", b"m", {}, clock=clock, sleep=clock.sleep)
    assert len(js.tries) == 1 and not clock.slept
