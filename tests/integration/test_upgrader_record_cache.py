"""The upgrade record between passes (bke_upgrader.store), on a real Redis: the pass gets back the
object it saved while Redis holds the same bytes, and a new object whenever anything else wrote
the record, or after `forget` (a pass that failed), or for a reader that asks for `fresh`."""
from __future__ import annotations

from bke.core.upgrade.run import StepRun, UpgradeRun
from bke_upgrader.store import UpgradeStore

C = "c1"


def _run(rid: str = "r1") -> UpgradeRun:
    return UpgradeRun(request_id=rid, cluster=C, current={"kubernetes": "1.33.2", "etcd": "3.5.1", "containerd": "2.1.1"},
                      target={"kubernetes": "1.34.1", "etcd": "3.5.1", "containerd": "2.1.1"},
                      steps=[StepRun(name="workers", batches=[["n1", "n2"], ["n3"]])], started_at="t0")


async def test_the_saved_record_is_reused_until_someone_else_writes_it(redis_client):
    store = UpgradeStore(redis_client)
    assert await store.start(_run(), lambda current: "") == ""
    first = await store.load(C)
    assert first is not None and await store.load(C) is first  # unchanged bytes: the same object
    first.steps[0].batch = 1
    await store.save(first)
    assert await store.load(C) is first

    fresh = await store.load(C, fresh=True)  # a reader's own copy, equal but not the pass's object
    assert fresh is not first and fresh == first

    other = UpgradeStore(redis_client)  # another replica advances the record
    theirs = await other.load(C)
    assert theirs is not None
    theirs.steps[0].done = 2
    await other.save(theirs)
    mine = await store.load(C)
    assert mine is not first and mine is not None and mine.steps[0].done == 2

    mine.steps[0].sent = True  # a failed pass: facts that were never saved
    store.forget(C)
    again = await store.load(C)
    assert again is not None and again is not mine and not again.steps[0].sent

    await redis_client.delete(f"bke:{C}:upgrade")
    assert await store.load(C) is None
