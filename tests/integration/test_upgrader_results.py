"""The upgrader's answers beside its record (bke_upgrader.store), on a real Redis: a pass reads
the batch's answers, and after the first read asks Redis only for the ones still missing; an
answer of another incarnation of the cluster is dropped and counted. Whose agent answered is the
dispatcher's judgement before it sends an answer on (tests/integration/
test_dispatcher_upgrader_answers.py), not checked here again (bke_upgrader.results says why)."""
from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

from bke.adapters.state.keys.plan import plan_meta_key
from bke.adapters.state.keys.upgrader import upgrade_results_key
from bke.contracts.agent import CommandResult
from bke.core.secrets.binding import new_incarnation
from bke_upgrader.store import UpgradeStore

C = "c1"


def _result(cid: str, status: str = "Succeeded") -> CommandResult:
    node = cid.split("/")[2]
    return CommandResult.model_validate({"commandId": cid, "cluster": C, "node": node, "agentId": "a", "status": status,
                                         "steps": [], "startedAt": "t0", "finishedAt": "t1"})


async def test_a_batch_s_answers_are_read_and_only_the_missing_ones_asked_for_again(redis_client):
    store = UpgradeStore(redis_client)
    batch = [f"{C}/upgrade@r1@workers/n{i}/0" for i in range(4)]
    other = f"{C}/upgrade@r1@agents/n9/0"
    await store.record_result(_result(other), "", "")
    await store.record_result(_result(batch[0]), "", "")
    got = await store.results(C, batch)
    assert set(got) == {batch[0]} and got[batch[0]]["status"] == "Succeeded"

    asked: list[list[str]] = []
    real = redis_client.hmget

    async def counting(key, fields):  # type: ignore[no-untyped-def]
        asked.append(list(fields))
        return await real(key, fields)

    redis_client.hmget = counting
    await store.record_result(_result(batch[1], "Failed"), "replace:runtime", "no")
    got = await store.results(C, batch)
    assert set(got) == {batch[0], batch[1]} and got[batch[1]]["status"] == "Failed"
    assert asked == [batch[1:]]  # the answer read before is not asked for again
    for cid in batch[2:]:
        await store.record_result(_result(cid), "", "")
    assert set(await store.results(C, batch)) == set(batch) and asked[-1] == batch[2:]
    reads = len(asked)
    assert set(await store.results(C, batch)) == set(batch) and len(asked) == reads  # nothing missing: no read
    assert await redis_client.hlen(upgrade_results_key(C)) == 5
    assert list(await store.results(C, [other])) == [other]


async def test_an_answer_the_dispatcher_sent_on_is_recorded_as_it_came(redis_client):
    """The dispatcher believed it (its node's accepted agent: bke_dispatcher.results, held by
    tests/integration/test_dispatcher_upgrader_answers.py): recorded without asking who the
    node's agent is, a failed step with its output."""
    store = UpgradeStore(redis_client)
    cid = f"{C}/upgrade@r1@workers/n1/0"
    assert await store.record_if_current(_result(cid, "Failed"), "replace:runtime", "no") == ""
    assert (await store.results(C, [cid]))[cid] == {"status": "Failed", "step": "replace:runtime", "stderr": "no",
                                                     "agentVersion": _result(cid).agent_version}
    assert await redis_client.hlen(upgrade_results_key(C)) == 1


async def test_a_result_of_another_incarnation_of_the_cluster_is_dropped_and_counted(redis_client):
    """A cluster made again under its name reuses the upgrade's command ids: an answer to the
    deleted cluster's command (answered from an agent's journal) is not recorded for the new
    run, whether it arrives alone or in a batch with the current ones; an answer without an
    incarnation (an unbound command's) is judged as before. The same rule for a restore's."""
    now = datetime.now(timezone.utc)
    old, current = new_incarnation(now - timedelta(days=1), "1" * 16), new_incarnation(now, "2" * 16)
    await redis_client.hset(plan_meta_key(C), mapping={"digest": "d", "incarnation": current})
    store = UpgradeStore(redis_client)
    cids = [f"{C}/upgrade@r1@workers/n{i}/0" for i in range(4)]
    answers = [_result(cids[0]).model_copy(update={"incarnation": old, "replayed": True}),
               _result(cids[1]).model_copy(update={"incarnation": current}),
               _result(cids[2]),  # an unbound command's answer (or an agent before the field)
               _result(cids[3]).model_copy(update={"incarnation": old})]
    whys = await asyncio.gather(*(store.record_if_current(res, "", "") for res in answers))
    assert whys[1:3] == ["", ""] and whys[0] == whys[3] == (
        f"it answers a command of incarnation {old} of its cluster, not the current {current}")
    assert set(await store.results(C, cids)) == {cids[1], cids[2]} and store.other_incarnation.count == 2
    assert await redis_client.hlen(upgrade_results_key(C)) == 2
    # a cluster without a plan (deleted, not made again yet): no incarnation is current
    await redis_client.delete(plan_meta_key(C))
    assert "not the current (no plan)" in await store.record_if_current(answers[1], "", "")
    assert store.other_incarnation.count == 3


async def test_concurrent_results_share_one_recording_and_each_gets_its_own_answer(redis_client):
    store = UpgradeStore(redis_client)
    now = datetime.now(timezone.utc)
    old, current = new_incarnation(now - timedelta(days=1), "1" * 16), new_incarnation(now, "2" * 16)
    await redis_client.hset(plan_meta_key(C), mapping={"digest": "d", "incarnation": current})
    calls: list[int] = []
    real = store.other_incarnations

    async def counting(cluster, results):  # type: ignore[no-untyped-def]
        calls.append(len(results))
        return await real(cluster, results)

    store.other_incarnations = counting  # type: ignore[method-assign]
    cids = [f"{C}/upgrade@r1@workers/n{i}/0" for i in range(7)]  # n5, n6: a deleted incarnation's
    answers = [_result(c).model_copy(update={"incarnation": old if i >= 5 else current}) for i, c in enumerate(cids)]
    whys = await asyncio.gather(*(store.record_if_current(res, "", "") for res in answers))
    assert calls == [7]  # one recording (one incarnation read, one write) for the seven
    assert whys[:5] == [""] * 5 and whys[5] == whys[6] != ""
    assert set(await store.results(C, cids)) == set(cids[:5])


async def test_own_answers_are_known_at_once_and_others_asked_for_at_most_every_interval(redis_client):
    store, other = UpgradeStore(redis_client), UpgradeStore(redis_client)  # two replicas
    batch = [f"{C}/upgrade@r1@workers/n{i}/0" for i in range(3)]
    assert await store.results(C, batch, read_every_s=3600.0) == {}  # a batch's first read asks Redis
    asked: list[list[str]] = []
    real = redis_client.hmget

    async def counting(key, fields):  # type: ignore[no-untyped-def]
        asked.append(list(fields))
        return await real(key, fields)

    redis_client.hmget = counting
    assert await store.record_if_current(_result(batch[0]), "", "") == ""
    assert await other.record_if_current(_result(batch[1]), "", "") == ""
    got = await store.results(C, batch, read_every_s=3600.0)
    assert set(got) == {batch[0]} and asked == []  # its own answer, without a read; the other's later
    got = await store.results(C, batch, read_every_s=0.0)  # the interval passed
    assert set(got) == {batch[0], batch[1]} and asked == [batch[1:]]
    assert set(await store.results(C, batch[1:], read_every_s=3600.0)) == {batch[1]}  # another batch: read at once
