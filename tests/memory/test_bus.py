"""The in-memory bus keeps what the services rely on of NATS (bus.py, jetstream.py say what)."""
from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout
from nats.js.api import ConsumerConfig

from .bus import CoreMsg, Router

pytestmark = pytest.mark.memory


async def test_a_queue_group_hands_each_message_to_one_member_and_a_plain_subscriber_gets_all() -> None:
    router = Router()
    nc = router.connect()
    got: dict[str, list[str]] = {"a": [], "b": [], "all": []}

    def keep(name: str) -> Callable[[CoreMsg], Awaitable[None]]:
        async def cb(msg: CoreMsg) -> None:
            got[name].append(msg.subject)
        return cb

    await nc.subscribe("bke.v1.x.*", queue="q", cb=keep("a"))
    await nc.subscribe("bke.v1.x.*", queue="q", cb=keep("b"))
    await nc.subscribe("bke.v1.>", cb=keep("all"))
    for i in range(4):
        await nc.publish(f"bke.v1.x.{i}", b"")
    await nc.publish("bke.v1.x.1.deeper", b"")  # `*` is one token: only `>` takes it
    await router.quiet()
    assert len(got["a"]) + len(got["b"]) == 4 and got["a"] and got["b"]
    assert len(got["all"]) == 5
    await router.close()


async def test_request_reply_and_no_responders() -> None:
    router = Router()
    nc = router.connect()

    async def answer(msg: CoreMsg) -> None:
        await msg.respond(msg.data.upper())

    with pytest.raises(NoRespondersError):
        await nc.request("bke.v1.status.get", b"x", timeout=1.0)
    await nc.subscribe("bke.v1.status.get", queue="q", cb=answer)
    assert (await nc.request("bke.v1.status.get", b"abc", timeout=1.0)).data == b"ABC"
    await router.close()


async def test_streams_deduplicate_redeliver_a_nack_and_drop_an_acked_work_queue_message() -> None:
    router = Router()
    js = router.connect().jetstream()
    for _ in range(2):
        await js.publish("bke.v1.cluster.install", b"one", headers={"Nats-Msg-Id": "m1"})
    cfg = ConsumerConfig(durable_name="planner", filter_subject="bke.v1.cluster.install")
    await js.add_consumer("BKE_COMMANDS", cfg)  # made after the publish: it still gets it, once
    sub = await js.pull_subscribe("bke.v1.cluster.install", durable="planner", stream="BKE_COMMANDS")
    [msg] = await sub.fetch(10, timeout=1.0)
    assert msg.metadata.num_delivered == 1
    await msg.nak(delay=30.0)
    [again] = await sub.fetch(10, timeout=5.0)
    assert again.data == b"one" and again.metadata.num_delivered == 2
    await again.ack()
    await router.quiet()
    late = await js.pull_subscribe("bke.v1.cluster.install", durable="late", stream="BKE_COMMANDS")
    with pytest.raises(NatsTimeout):
        await late.fetch(1, timeout=0.05)  # acknowledged in a work-queue stream: gone
    await router.close()
