"""`settle` answers for a message it gives up on: the service's `give_up` hook runs once, after
the last delivery, so that the operation the message belonged to fails instead of waiting."""
from __future__ import annotations

from types import SimpleNamespace

from bke.adapters.bus.delivery import settle


class _Msg:
    def __init__(self, delivered: int):
        self.raw_message = SimpleNamespace(subject="bke.v1.plan.created", metadata=SimpleNamespace(num_delivered=delivered))
        self.body = b'{"cluster": "c"}'
        self.acked = self.nacked = 0

    async def ack(self) -> None:
        self.acked += 1

    async def nack(self, delay: float | None = None) -> None:
        self.nacked += 1


class _Broker:
    def __init__(self):
        self.published: list[str] = []

    async def publish(self, payload: bytes, subject: str, stream: str | None = None,
                      headers: dict[str, str] | None = None) -> None:
        self.published.append(subject)


async def _boom(body: bytes) -> None:
    raise RuntimeError("the handler has a bug")


async def test_give_up_runs_on_the_last_delivery_only():
    told: list[tuple[bytes, str]] = []

    async def give_up(body: bytes, reason: str) -> None:
        told.append((body, reason))

    early, broker = _Msg(delivered=2), _Broker()
    await settle(early, _boom, broker=broker, service="renderer", max_deliver=5, give_up=give_up)
    assert early.nacked == 1 and not early.acked and told == [] and broker.published == []

    last = _Msg(delivered=5)
    await settle(last, _boom, broker=broker, service="renderer", max_deliver=5, give_up=give_up)
    assert last.acked == 1 and broker.published == ["bke.v1.deadletter.renderer"]
    assert told == [(last.body, "RuntimeError: the handler has a bug")]


async def test_a_failing_give_up_hook_never_wedges_the_queue():
    async def give_up(body: bytes, reason: str) -> None:
        raise RuntimeError("bus gone too")

    last, broker = _Msg(delivered=5), _Broker()
    await settle(last, _boom, broker=broker, service="certs", max_deliver=5, give_up=give_up)
    assert last.acked == 1 and broker.published == ["bke.v1.deadletter.certs"]
