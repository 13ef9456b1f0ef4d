"""The consumers' short ack wait and the in-progress acks that make it safe."""
from __future__ import annotations

import asyncio

import pytest
from nats.js.api import AckPolicy, ConsumerConfig, StreamConfig

from bke.adapters.bus.fast_consumer import FastConsumer

pytestmark = [pytest.mark.integration, pytest.mark.faults]

ACK_WAIT = 1.0


async def _until(check, what: str, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    """Poll `check` (the consumer's state on the server) until it holds, under a deadline."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, what
        await asyncio.sleep(0.05)  # polling the consumer's state under a deadline


async def test_a_handler_running_three_ack_waits_is_not_redelivered_and_old_durables_get_the_short_wait(nats_client):
    js = nats_client.jetstream()
    await js.add_stream(StreamConfig(name="FAULTS_ACKS", subjects=["faults.acks.>"]))
    # a durable made by an earlier release, with the old 60 s ack wait
    await js.add_consumer("FAULTS_ACKS", ConsumerConfig(durable_name="slow", ack_policy=AckPolicy.EXPLICIT, ack_wait=60,
                                                        filter_subject="faults.acks.>"))
    calls: list[int] = []
    done = asyncio.Event()

    async def work(body: bytes) -> None:
        calls.append(1)
        await asyncio.sleep(3 * ACK_WAIT)  # the long work itself
        done.set()

    # two replicas on the durable: the idle one would get the message if its ack wait ran out
    replicas = [FastConsumer("faults.acks.>", "FAULTS_ACKS", "slow", work, service="test", broker=None,
                             max_deliver=5, ack_wait=ACK_WAIT, batch=1, workers=1) for _ in range(2)]
    for consumer in replicas:
        await consumer.start(nats_client)
    try:
        assert (await js.consumer_info("FAULTS_ACKS", "slow")).config.ack_wait == ACK_WAIT
        await js.publish("faults.acks.one", b"x")
        await asyncio.wait_for(done.wait(), timeout=30)

        async def acked() -> bool:
            info = await js.consumer_info("FAULTS_ACKS", "slow")
            return info.num_ack_pending == 0 and info.num_redelivered == 0
        await _until(acked, "the message was not acked")
        assert calls == [1]  # handled once: in-progress acks kept it from being redelivered
    finally:
        for consumer in replicas:
            await consumer.stop()
        await js.delete_stream("FAULTS_ACKS")
