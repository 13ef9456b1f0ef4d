"""A consumer of agents' outputs counts each node's stray ones and reports a flood once per node
and window: one summary dead letter without payload and one event (bke.adapters.bus.flood)."""
from __future__ import annotations

import base64
from datetime import datetime, timedelta, timezone

import pytest

from bke.adapters.bus.delivery import _SUBJECT
from bke.adapters.bus.flood import FLOODS_METRIC, STRAY_METRIC, FloodWatch, mark_stray
from bke.adapters.http.metrics import ServiceMetrics
from bke.contracts.agent import agent_subject
from bke.contracts.deadletter import AGENTS_FLOODING, AgentFlooding, DeadLettered
from bke.core.errors import MalformedMessage
from bke.core.flood import FloodLimit

T0 = datetime(2030, 1, 1, tzinfo=timezone.utc)
LIMIT = FloodLimit(outputs=3, window_s=60.0, tracked=100)


class _Bus:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes]] = []

    async def publish(self, body: bytes, subject: str, headers: dict[str, str]) -> None:
        self.sent.append((subject, body))


def _watch(clock: list[datetime]) -> tuple[FloodWatch, _Bus, ServiceMetrics]:
    bus, metrics = _Bus(), ServiceMetrics("dispatcher")
    return FloodWatch(metrics, "dispatcher", bus.publish, lambda: clock[0], LIMIT), bus, metrics


async def _malformed(body: bytes) -> None:
    raise MalformedMessage("malformed CommandResult: 1 error")


async def test_a_flood_of_malformed_results_is_dead_lettered_raw_until_the_bound_then_summarised_once() -> None:
    clock = [T0]
    watch, bus, metrics = _watch(clock)
    work = watch.guard("result", _malformed)
    _SUBJECT.set(agent_subject("c1", "n1", "result"))
    for _ in range(3):  # within the bound: raised, so the consumer dead-letters each with its bytes
        with pytest.raises(MalformedMessage):
            await work(b"x" * 100)
    for i in range(20):  # past it: acknowledged and dropped, reported once
        clock[0] = T0 + timedelta(seconds=1 + i)
        await work(b"y" * 1000)
    assert [s for s, _ in bus.sent] == ["bke.v1.deadletter.dispatcher", AGENTS_FLOODING]
    letter = DeadLettered.model_validate_json(bus.sent[0][1])
    assert letter.payload_b64 == "" and letter.reason.startswith("flood: node n1 of cluster c1")
    assert "4 outputs" in letter.reason and "1300 bytes" in letter.reason and "more than 3" in letter.reason
    assert base64.b64decode(letter.payload_b64) == b"" and "yyyy" not in letter.reason
    event = AgentFlooding.model_validate_json(bus.sent[1][1])
    assert (event.cluster, event.node, event.outputs, event.malformed, event.bytes) == ("c1", "n1", 4, 4, 1300)
    assert metrics.sample(f"{STRAY_METRIC}_total", {"service": "dispatcher", "kind": "result"}) == 23.0
    assert metrics.sample(f"{FLOODS_METRIC}_total", {"service": "dispatcher"}) == 1.0


async def test_results_the_handler_marks_stray_count_and_the_others_do_not() -> None:
    clock = [T0]
    watch, bus, _ = _watch(clock)
    taken: list[bytes] = []

    async def handler(body: bytes) -> None:
        taken.append(body)
        if body.startswith(b"stray"):
            mark_stray()

    work = watch.guard("result", handler)
    _SUBJECT.set(agent_subject("c1", "n1", "result"))
    for i in range(100):  # a busy node whose results all answer commands in flight
        await work(b"ok%d" % i)
    assert bus.sent == []
    for i in range(4):
        await work(b"stray%d" % i)
    assert [s for s, _ in bus.sent] == ["bke.v1.deadletter.dispatcher", AGENTS_FLOODING]
    assert len(taken) == 104  # a well-formed result is always handled: only the handler knows


async def test_another_nodes_outputs_in_the_same_window_are_counted_apart() -> None:
    clock = [T0]
    watch, bus, _ = _watch(clock)
    work = watch.guard("result", _malformed)
    _SUBJECT.set(agent_subject("c1", "flooder", "result"))
    for _ in range(10):
        try:
            await work(b"z")
        except MalformedMessage:
            pass
    _SUBJECT.set(agent_subject("c2", "n1", "result"))
    with pytest.raises(MalformedMessage):  # the other node's first malformed one is kept whole
        await work(b"z")
    assert len(bus.sent) == 2


async def test_every_refusal_counts_and_a_flooding_nodes_are_dropped_before_their_handler() -> None:
    clock = [T0]
    watch, bus, metrics = _watch(clock)
    handled: list[bytes] = []

    async def on_refusal(body: bytes) -> None:
        handled.append(body)

    work = watch.guard("refused", on_refusal, every=True)
    _SUBJECT.set(agent_subject("c1", "n1", "refused"))
    for i in range(10):
        await work(b"r%d" % i)
    assert len(handled) == 3 and len(bus.sent) == 2
    assert metrics.sample(f"{STRAY_METRIC}_total", {"service": "dispatcher", "kind": "refused"}) == 10.0


async def test_outside_a_delivery_nothing_is_counted() -> None:
    watch, bus, _ = _watch([T0])
    _SUBJECT.set("")
    work = watch.guard("result", _malformed)
    for _ in range(10):
        with pytest.raises(MalformedMessage):
            await work(b"x")
    assert bus.sent == []


async def test_a_watch_apart_counts_a_node_s_outputs_on_its_own_and_shares_the_counters() -> None:
    """The dispatcher's over the deprecated `upgrader-result` subject: counted as its former
    reader counted them, apart from the node's results and refusals."""
    clock = [T0]
    watch, bus, metrics = _watch(clock)
    apart = watch.apart()
    _SUBJECT.set(agent_subject("c1", "n1", "result"))
    for _ in range(3):  # the bound of one watch, reached on it
        with pytest.raises(MalformedMessage):
            await watch.guard("result", _malformed)(b"x")
    _SUBJECT.set(agent_subject("c1", "n1", "upgrader-result"))
    for _ in range(3):  # as many again on the other: still dead-lettered one by one, no flood
        with pytest.raises(MalformedMessage):
            await apart.guard("upgrader-result", _malformed)(b"x")
    assert bus.sent == []
    await apart.guard("upgrader-result", _malformed)(b"x")  # past its own bound: reported, dropped
    assert [s for s, _ in bus.sent] == ["bke.v1.deadletter.dispatcher", AGENTS_FLOODING]
    assert metrics.sample(f"{STRAY_METRIC}_total", {"service": "dispatcher", "kind": "upgrader-result"}) == 4.0
    assert metrics.sample(f"{FLOODS_METRIC}_total", {"service": "dispatcher"}) == 1.0
