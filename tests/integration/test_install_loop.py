"""The install on the one loop, against a real Redis: its end is announced once, also by the
replica that resumes after a crash between the end and its announcement, and never again for an
install that ended before ends were recorded as announced."""
from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
from redis.asyncio import Redis

from bke.adapters.state import PlanCache
from bke.adapters.state.keys.dispatcher import install_key
from bke.adapters.state.nodefiles import RedisNodeFiles
from bke.contracts.install import InstallFinished, PhaseChanged
from bke.contracts.statuses import OperationStatus
from bke.core.operation import Fail
from bke_dispatcher.ops.install.commands import InstallCommands
from bke_dispatcher.ops.install.run import Installs
from bke_dispatcher.ops.install.store import InstallStore
from bke_dispatcher.state import DispatcherState
from tests.trust_helpers import signed

pytestmark = pytest.mark.integration
NOW = datetime(2026, 1, 2, tzinfo=timezone.utc)


@pytest.fixture
async def loop(redis_url, redis_client):
    """The install's loop on a real Redis, and what it published: (subject, body, headers)."""
    r = Redis.from_url(redis_url)
    sent: list[tuple[str, bytes, dict[str, str]]] = []

    async def publish(body: bytes, subject: str, headers: dict[str, str]) -> None:
        sent.append((subject, body, headers))

    state = DispatcherState(r)
    commands = InstallCommands(state, RedisNodeFiles(r), None, publish, publish, lambda: NOW, signed)  # type: ignore[arg-type]
    try:
        yield Installs(InstallStore(state), PlanCache(r), commands, None, lambda: NOW, "me"), sent, r  # type: ignore[arg-type]
    finally:
        await r.aclose()


async def test_an_end_written_but_not_announced_is_announced_once_after_a_restart(loop):
    installs, sent, r = loop
    state = installs.state
    assert await state.start_install("c", "r1", "t0", "d1")
    await state.set_phase("c", "agents", status="Succeeded", ok="4", total="4")
    await state.set_phase("c", "node-env", status="Running", ok="3", failed="1", total="4", cursor="4")
    # the replica that ended it wrote the end, then died before `install finished` went out
    rec = await installs.store.load("c")
    assert rec is not None and rec.running
    await installs.ending(rec, Fail("1 node(s) failed: n4", ("n4",)))
    rec.finish(OperationStatus.FAILED, "1 node(s) failed: n4", "t1")
    assert await installs.store.save(rec)
    assert (await r.hget(install_key("c"), "endSent")) == b"0"
    assert (await state.phase("c", "node-env"))["status"] == "Failed"

    # the next replica resumes it, and its pass announces the end, once
    assert await installs.resume_all() == ["c"]
    assert (await installs.reconcile("c")).status == "done"
    finished = [InstallFinished.model_validate_json(b) for s, b, _ in sent if s.endswith(".finished")]
    assert [(f.status, f.phase, f.node, f.kind, f.at, f.nodes_changed) for f in finished] == [
        ("Failed", "node-env", "n4", "operational", "t1", False)]
    assert sent[-1][2] == {"Nats-Msg-Id": "finished:c:r1:Failed:t1"}  # the same id if it went out twice
    assert (await r.hget(install_key("c"), "endSent")) == b"1"
    sent.clear()
    assert await installs.resume_all() == [] and (await installs.reconcile("c")).status == "done" and sent == []


async def test_an_install_that_ended_before_ends_were_recorded_as_announced_is_not_announced_again(loop):
    installs, sent, r = loop
    assert await installs.state.start_install("old", "r0", "t0", "d0")
    await r.hset(install_key("old"), mapping={"status": "Succeeded", "finishedAt": "t1"})  # no `endSent`
    assert await installs.resume_all() == []
    assert (await installs.reconcile("old")).status == "done" and sent == []


async def test_a_refused_install_fails_its_first_phase_and_says_so_once(loop):
    installs, sent, _ = loop
    assert await installs.state.start_install("c", "r1", "t0", "d1")
    await installs.refuse("c", "r1", "reset z1 of c is running: one operation per cluster")
    await installs.refuse("c", "r1", "again")  # ended already: nothing more
    await installs.refuse("c", "other", "not this install")
    events = [(s.rsplit(".", 1)[-1], json.loads(b)) for s, b, _ in sent]
    assert [(kind, e["status"], e.get("phase")) for kind, e in events] == [("phase", "Failed", "agents"),
                                                                         ("finished", "Failed", "agents")]
    phase = PhaseChanged.model_validate(events[0][1])
    assert phase.message == "reset z1 of c is running: one operation per cluster"
    inst = await installs.state.install("c")
    assert (inst["status"], inst["kind"], inst["endSent"]) == ("Failed", "operational", "1")
