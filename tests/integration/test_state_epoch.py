"""bke.adapters.state.epoch and the dispatcher's reaction (bke_dispatcher.state_loss) against a real Redis:
replicas adopt the one epoch the admin side wrote; a service on a store without one waits, not
ready, naming `bke state init`, and goes on once it exists; a store emptied or replaced is
reported once and every message waits (StateLost, a TemporaryError) until the epoch is back; a
Redis that does not answer is not a loss; the dispatcher fails the installs it saw running (all
of them, or the one whose record vanished) with 'state lost', and resumes on restore."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest
import redis.asyncio as aioredis

from bke.contracts.install import InstallFinished
from bke.core.errors import TemporaryError
from bke.adapters.bus.readiness import Readiness
from bke.adapters.state.epoch import (
    NOT_INITIALISED, STATE_LOST, EpochWatch, StateLost, StateNotInitialised, ensure_epoch, watch_epoch, write_epoch,
)
from bke.adapters.state.keys.common import epoch_key
from bke_dispatcher.state import DispatcherState
from bke_dispatcher.state_loss import StateLossReaction

pytestmark = pytest.mark.integration
NOW = datetime(2026, 12, 1, tzinfo=timezone.utc)


class Calls:
    def __init__(self, fail_first: int = 0) -> None:
        self.seen: list[str] = []
        self.fail_first = fail_first

    async def __call__(self, arg: str) -> None:
        self.seen.append(arg)
        if len(self.seen) <= self.fail_first:
            raise ConnectionError("NATS away")


async def test_replicas_adopt_the_admins_epoch_and_a_loss_is_reported_once_until_restored(
        redis_client: aioredis.Redis) -> None:
    assert await ensure_epoch(redis_client, "e-a") != "e-a"  # the fixture's `bke state init` came first: SET NX
    await write_epoch(redis_client, "e-a")
    lost, restored = Calls(), Calls()
    a = EpochWatch(redis_client, interval_s=0, on_lost=lost, on_restored=restored)
    b = EpochWatch(redis_client, interval_s=0)
    assert await a.start() == "e-a" and await b.start() == "e-a"
    assert await a.check() and not a.lost
    a.ensure_intact()

    await redis_client.flushdb()
    assert not await a.check() and not await a.check()
    assert len(lost.seen) == 1 and "emptied" in lost.seen[0]
    with pytest.raises(StateLost, match="state lost: restore with `bke state restore`") as exc:
        a.ensure_intact()
    assert isinstance(exc.value, TemporaryError) and exc.value.delay >= 1  # the message waits in its stream

    await redis_client.set(epoch_key(), "someone-else")  # a store replaced is no better than an empty one
    assert not await a.check() and len(lost.seen) == 1

    await write_epoch(redis_client, "e-a")  # what `bke state restore` does last
    assert await a.check() and restored.seen == ["e-a"]
    a.ensure_intact()


async def test_a_failed_report_is_tried_again_and_an_outage_is_no_loss(redis_client: aioredis.Redis) -> None:
    lost = Calls(fail_first=1)
    await write_epoch(redis_client, "e1")
    w = EpochWatch(redis_client, interval_s=0, on_lost=lost)
    await w.start()
    await redis_client.delete(epoch_key())
    with pytest.raises(ConnectionError):
        await w.check()
    assert not await w.check() and len(lost.seen) == 2  # reported on the next round
    await write_epoch(redis_client, "e1")
    assert await w.check()
    dead = aioredis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.5)
    w.redis = dead
    try:
        assert await w.check() and not w.lost  # Redis away: an outage, not a loss
    finally:
        await dead.aclose()


class _Svc:
    """The part of a Service a watch hooks into (bke.adapters.state.epoch._ServiceHooks)."""

    def __init__(self) -> None:
        self.name, self.readiness = "svc", Readiness("svc", ("nats",))
        self.readiness.set("nats", True)
        self.guards: list = []
        self.after_start: list = []
        self.before_stop: list = []


async def test_a_service_on_a_store_without_an_epoch_waits_not_ready_until_bke_state_init(
        redis_client: aioredis.Redis) -> None:
    await redis_client.delete(epoch_key())  # no `bke state init` yet
    svc = _Svc()
    w = watch_epoch(svc, redis_client, interval_s=0)
    await svc.after_start[0]()
    try:
        assert w.epoch is None and w.waiting and not w.lost
        assert not svc.readiness.ready and svc.readiness.reasons() == [NOT_INITIALISED]
        with pytest.raises(StateNotInitialised, match="run `bke state init`") as exc:
            svc.guards[0]()  # every message waits in its stream
        assert isinstance(exc.value, TemporaryError)
        assert not await w.check()
        assert await redis_client.exists(epoch_key()) == 0  # a service never writes one

        await ensure_epoch(redis_client, "e-new")  # what `bke state init` does
        assert await w.check() and w.epoch == "e-new" and not w.waiting
        assert svc.readiness.ready
        svc.guards[0]()
    finally:
        await w.stop()


async def test_dispatcher_fails_the_running_installs_it_saw_and_resumes_on_restore(redis_client: aioredis.Redis) -> None:
    state = DispatcherState(redis_client)
    published: list[tuple[str, InstallFinished]] = []
    stopped, resumed = [], []

    async def publish(payload: bytes, subject: str, headers: dict[str, str]) -> None:
        published.append((subject, InstallFinished.model_validate_json(payload)))

    async def stop_loops() -> None:
        stopped.append(True)

    async def resume() -> list[str]:
        resumed.append(True)
        return []

    loss = StateLossReaction(state, publish, lambda: NOW, stop_loops, resume)
    for c in ("a", "b", "done"):
        await state.start_install(c, f"rid-{c}", NOW.isoformat(), plan_digest=f"d-{c}")
    await state.set_install("done", status="Succeeded")
    await loss.on_intact("e")
    assert sorted(loss.running) == ["a", "b"]

    # one cluster's record vanishes while the epoch stays: that cluster alone fails
    await redis_client.delete("bke:b:install")
    await loss.on_intact("e")
    assert [(s, ev.cluster) for s, ev in published] == [("bke.v1.install.b.finished", "b")]
    assert "vanished" in published[0][1].message

    # the whole state lost: every install it saw running fails, the loops stop
    published.clear()
    await loss.on_lost("the store has no epoch: it was emptied")
    assert stopped and [ev.cluster for _, ev in published] == ["a"]
    ev = published[0][1]
    assert ev.status == "Failed" and ev.kind == "operational" and ev.message.startswith(STATE_LOST)
    assert ev.nodes_changed and ev.request_id == "rid-a" and ev.plan_digest == "d-a"
    await loss.on_restored("e")
    assert resumed
