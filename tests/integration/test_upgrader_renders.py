"""The upgrade's renders in their child process (bke_upgrader.renders): the files that differ
come back, a plan that does not render is a permanent failure naming the renderer's error, and
a cancelled render leaves no process behind."""
from __future__ import annotations

import asyncio
import gc
import os
import weakref

import pytest

from bke.core.upgrade import resolve_target
from bke.core.upgrade.node_commands import changed_files
from bke.core.upgrade.target_plan import target_plan
from bke_upgrader.render_child import render_by_node
from bke_upgrader.renders import RenderFailed, Renders

from ..unit.upgrade_helpers import SPLIT, plan_of

pytestmark = [pytest.mark.integration]


def _plans():
    old = plan_of(SPLIT)
    return old, target_plan(old, resolve_target(old, "1.34.1", "3.5.21"))


async def test_the_child_hands_back_each_nodes_changes_and_the_new_addons():
    old, new = _plans()
    got = await Renders().get("r1", old, new)
    full_old, _ = render_by_node(old)
    full_new, addons = render_by_node(new)
    assert set(got.new) == set(full_new)
    for host in full_new:
        assert changed_files(got.old[host], got.new[host]) == changed_files(full_old[host], full_new[host])
    assert got.new_addons == addons


async def test_a_plan_that_does_not_render_fails_permanently_with_the_renderers_error():
    old, new = _plans()
    broken = new.model_copy(update={"kubernetes_version": "v9.99.0"})  # no template set, no versions row
    with pytest.raises(RenderFailed) as err:
        await Renders().get("r1", old, broken)
    assert "9.99" in str(err.value)


async def test_a_cancelled_render_kills_its_child(monkeypatch):
    old, new = _plans()
    started: list[asyncio.subprocess.Process] = []
    real = asyncio.create_subprocess_exec

    async def spawn(*args, **kw):  # the real child, noted
        proc = await real(*args, **kw)
        started.append(proc)
        return proc

    monkeypatch.setattr(asyncio, "create_subprocess_exec", spawn)
    fut = Renders().start("r1", old, new)
    deadline = asyncio.get_running_loop().time() + 10
    while not started:
        assert asyncio.get_running_loop().time() < deadline, "no child started"
        await asyncio.sleep(0.01)  # polling under a deadline
    fut.cancel()
    with pytest.raises(asyncio.CancelledError):
        await fut
    assert started[0].returncode is not None  # reaped
    with pytest.raises(ProcessLookupError):
        os.kill(started[0].pid, 0)


async def test_the_service_freezes_the_heap_for_a_render_and_collects_what_was_frozen_at_the_next_one():
    old, new = _plans()
    renders = Renders(freeze_heap=True)

    class Cycle:
        me: object = None

    gc.disable()  # no automatic pass: the cycle below is garbage only the freeze's own pass may collect
    try:
        first = renders.start("r1", old, new)
        assert gc.get_freeze_count() > 0  # the plans it renders from: skipped by full collections
        cycle = Cycle()
        cycle.me = cycle
        ref = weakref.ref(cycle)
        del cycle
        await first
        assert gc.get_freeze_count() > 0 and ref() is not None  # frozen with the render, uncollected
        second = renders.start("r2", old, new)  # the cluster's next request: unfrozen, collected once
        assert ref() is None and gc.get_freeze_count() > 0
        await second
    finally:
        gc.enable()
        gc.unfreeze()  # this test process's own collector as it was
    await Renders().get("r3", old, new)  # a test's Renders (no freeze_heap) leaves the collector alone
    assert gc.get_freeze_count() == 0
