"""The operations' one loop (bke.adapters.operation) against the real Redis of the session
fixture, driving a toy operation (one command per node, one node at a time, a local step that
may say "not yet"): a start inside the cluster's operation slot, commands carried out through
the table, answers folded once, the slot released before the end is announced, the end event
once (also after a crash between the two), a lease another replica holds, and a carrier that
moves nothing stopped instead of looping."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone

import pytest
from redis.asyncio import Redis

from bke.adapters.operation import EndEvent, OperationLoop, RecordStore
from bke.adapters.state.lease import claim_lease
from bke.adapters.state.operation_slot import claim_operation, operation_holder
from bke.contracts.agent import AgentCommand, CommandResult, StepResult
from bke.contracts.base import Message
from bke.core.operation import (
    Act, Answers, Decision, Fail, OperationStatus, RunLocally, RunStatus, Send, StepRun, Succeed, Wait, fold,
)
from tests.unit.core.test_operation_core import Toy as Base, apply

pytestmark = pytest.mark.integration
NOW = datetime(2026, 6, 1, tzinfo=timezone.utc)


class Changed(Message):
    cluster: str
    status: str
    done: list[str]


class Ended(Message):
    status: str


@dataclass(kw_only=True)
class Toy(Base):
    checked: bool = False  # the local step ran
    ended_sent: bool = False


def decide(t: Toy) -> Decision:
    failed = next((n for n in t.nodes if n.status == RunStatus.FAILED), None)
    if failed is not None:
        return Fail(f"node {failed.hostname} step {failed.step}", (failed.hostname,))
    if not t.checked:
        return RunLocally("check")
    if any(n.status == RunStatus.RUNNING for n in t.nodes):
        return Wait("a node in flight", delay=3.0)
    pending = next((n for n in t.nodes if n.status == RunStatus.PENDING), None)
    return Send((pending.hostname,)) if pending is not None else Succeed("every node")


class ToyLoop(OperationLoop[Toy]):
    def __init__(self, redis: Redis, events: list[tuple[str, bytes, bool]], kicks: list[str], ready: Callable[[], bool]):
        async def publish(body: bytes, subject: str, headers: dict[str, str]) -> None:
            # each event with whether the cluster's slot was still held when it went out
            events.append((subject, body, await operation_holder(redis, "c") is not None))

        async def sign(cmd: AgentCommand) -> AgentCommand:
            return cmd.model_copy(update={"signature_b64": "signed"})

        store = RecordStore(redis, Toy.from_json, lambda c: f"bke:{c}:toy", lambda c: f"bke:{c}:toy:results", "bke:toys")
        super().__init__(store, publish, lambda: NOW, "me", 15000, kicks.append, sign=sign, kind="rotation",
                         carriers={"send": self.send, "check": self.check})
        self.ready, self.events = ready, events

    async def send(self, t: Toy, d: Act) -> Decision | None:
        for run in t.nodes:
            if run.hostname in d.nodes:
                await self.send_command(t.cluster, run.hostname, run.command_id, f"toy@{t.request_id}", [])
                run.status = RunStatus.RUNNING
        return None

    async def check(self, t: Toy, d: Act) -> Decision | None:
        if not self.ready():
            return Wait("the check is not ready")
        t.checked = True
        return None

    def fold(self, rec: Toy, answers: Answers) -> bool:
        return fold(rec, answers.commands, apply)

    async def decider(self, rec: Toy) -> Callable[[Toy], Decision]:
        return decide

    def changed(self, rec: Toy, at: str) -> tuple[Message, str]:
        done = [n.hostname for n in rec.nodes if n.status == RunStatus.SUCCEEDED]
        return Changed(cluster=rec.cluster, status=rec.status, done=done), "toy.changed"

    def end_event(self, rec: Toy) -> EndEvent | None:
        return None if rec.ended_sent else EndEvent(Ended(status=rec.status), "toy.ended", f"ended:{rec.request_id}")

    def end_sent(self, rec: Toy) -> None:
        rec.ended_sent = True


def new_toy(rid: str = "r1") -> Toy:
    return Toy(request_id=rid, cluster="c", started_at="t0",
               nodes=[StepRun(hostname=h, command_id=f"c/toy@{rid}/{h}/0") for h in ("a", "b")])


def answer(cid: str, status: str = "Succeeded") -> CommandResult:
    node = cid.split("/")[2]
    return CommandResult(command_id=cid, cluster="c", node=node, agent_id="g", status=status, started_at="t",
                         finished_at="t", steps=[StepResult(id="s1", status=status, stderr="boom")])


@pytest.fixture
async def toys(redis_url, redis_client):
    r = Redis.from_url(redis_url)
    events: list[tuple[str, bytes, bool]] = []
    kicks: list[str] = []
    ready = [False]
    try:
        yield ToyLoop(r, events, kicks, lambda: ready[0]), events, kicks, ready, r
    finally:
        await r.aclose()


def subjects(events: list[tuple[str, bytes, bool]]) -> list[str]:
    return [s for s, _, _ in events]


async def test_an_operation_runs_through_the_table_and_frees_its_slot_before_it_is_announced(toys):
    loop, events, kicks, ready, r = toys
    assert await loop.begin(new_toy(), lambda cur: "") == ""
    assert kicks == ["c"] and subjects(events) == ["toy.changed"]
    assert await loop.begin(new_toy("r2"), lambda cur: "") == (
        "certificate rotation r1 of c is running: one operation per cluster")  # the slot refuses another
    # a local step that is not ready yet: the pass waits with its reason, nothing is sent
    out = await loop.reconcile("c")
    assert (out.status, out.reason, len(events)) == ("wait", "the check is not ready", 1)
    ready[0] = True
    out = await loop.reconcile("c")  # checked, then node a's command: one node at a time
    assert (out.status, out.delay, out.reason) == ("wait", 3.0, "a node in flight")
    assert [n.status for n in (await loop.store.load("c")).nodes] == ["Running", "Pending"]
    [cmd] = [AgentCommand.model_validate_json(b) for s, b, _ in events if s.endswith(".command")]
    assert (cmd.command_id, cmd.node, cmd.issued_at, cmd.signature_b64) == ("c/toy@r1/a/0", "a", NOW.isoformat(), "signed")
    assert subjects(events)[-2:] == ["bke.v1.agent.c.a.command", "toy.changed"]  # the command, then the view
    await loop.on_result(answer("c/toy@r1/a/0"))
    await loop.on_result(answer("c/toy@r1/a/0"))  # a duplicate counts once
    await loop.on_result(answer("c/toy@other/a/0"))  # not this operation's
    assert (await loop.reconcile("c")).status == "wait"
    await loop.on_result(answer("c/toy@r1/b/0"))
    assert (await loop.reconcile("c")).status == "done"
    [(_, ended, held)] = [e for e in events if e[0] == "toy.changed"][-1:]
    assert ended == b'{"cluster":"c","status":"Succeeded","done":["a","b"]}' and not held
    assert subjects(events)[-1] == "toy.ended" and await operation_holder(r, "c") is None
    assert (await loop.reconcile("c")).status == "done" and subjects(events).count("toy.ended") == 1
    assert await loop.resume_all() == []


async def test_a_failed_node_fails_it_and_an_unannounced_end_is_announced_after_a_restart(toys):
    loop, events, kicks, ready, r = toys
    ready[0] = True
    await loop.begin(new_toy(), lambda cur: "")
    await loop.reconcile("c")
    await loop.on_result(answer("c/toy@r1/a/0", "Failed"))
    rec = await loop.store.load("c")
    assert loop.fold(rec, await loop.store.results("c"))
    rec.finish(OperationStatus.FAILED, "crashed before its end went out", "t1")  # as a pass that died after its save
    await loop.store.save(rec)
    assert await loop.resume_all() == ["c"]
    assert (await loop.reconcile("c")).status == "done"
    assert subjects(events)[-1] == "toy.ended" and await operation_holder(r, "c") is None
    # a failure in the pass itself names the reason and the node
    await loop.store.redis.delete("bke:c:toy")
    await loop.begin(new_toy("r3"), lambda cur: "")
    await loop.reconcile("c")
    await loop.on_result(answer("c/toy@r3/a/0", "Failed"))
    out = await loop.reconcile("c")
    assert (out.status, out.reason, out.node) == ("failed", "node a step s1", "a")


async def test_a_record_check_that_refuses_gives_the_claimed_slot_back_and_part_of_claims_nothing(toys):
    loop, events, _, _, r = toys
    assert await loop.begin(new_toy(), lambda cur: "not now") == "not now"
    assert await operation_holder(r, "c") is None and await loop.store.load("c") is None and not events
    assert (await claim_operation(r, "c", "apply", "a1", "t0")).won
    assert await loop.begin(new_toy(), lambda cur: "", part_of="a1") == ""
    holder = await operation_holder(r, "c")
    assert (holder.kind, holder.request_id) == ("apply", "a1")


async def test_a_lease_held_elsewhere_waits_and_a_carrier_that_moves_nothing_is_stopped(toys):
    loop, _, _, ready, r = toys
    ready[0] = True
    await loop.begin(new_toy(), lambda cur: "")
    assert await claim_lease(r, "c", "rotation", "someone-else", 5000)
    out = await loop.reconcile("c")
    assert (out.status, out.reason) == ("wait", "another replica holds the rotation lease")
    await r.delete("bke:c:lease:rotation")

    async def nothing(t: Toy, d: Act) -> Decision | None:
        return None

    loop.carriers = {**loop.carriers, "send": nothing}
    with pytest.raises(RuntimeError, match="carried out, then decided again"):
        await loop.reconcile("c")
