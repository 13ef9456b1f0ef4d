"""SIGKILL of each service, and of an agent, at points of a real lab install (real NATS, Redis,
etcd; every service and agent its own process). Each case: the install finishes, no completed
command runs twice (the agents' own execution logs), and every service is running at the end.

The fast table runs in CI as one install in which each of them is killed in turn, at its point;
`-m soak` runs each of those kills in an install of its own, and every service at every point
of the table.
"""
from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from bke.adapters.bus.connect import connect_nats

from bke.adapters.runtime.processes import pid_alive, poll_until
from tests.e2e.lab_helpers import Lab

pytestmark = pytest.mark.e2e
SEED = "examples/seed-3m1w.yaml"

# (process, the phase that is Running when it is killed), in phase order. "agent:<host>" is
# that node's agent.
FAST = [
    ("planner", "agents"),
    ("certs", "agents"),  # agents are registering: their bundles are being sealed
    ("renderer", "node-env"),
    ("agent:master1", "etcd"),  # its etcd command may be running
    ("dispatcher", "control-plane-join"),
]
POINTS = ("agents", "node-env", "etcd", "control-plane-init", "workers")
SLOW = [(p, point) for p in ("planner", "certs", "renderer", "dispatcher", "agent:master2") for point in POINTS
        if (p, point) not in FAST]


@pytest.fixture
def lab(tmp_path):
    lab = Lab(tmp_path / "lab", Path(SEED)).start()
    yield lab
    lab.down()


def _kill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    poll_until(lambda: True if not pid_alive(pid) else None, timeout=10, what=f"pid {pid} to die")


async def _kill_at(lab: Lab, process: str, point: str) -> None:
    install = asyncio.create_task(lab.install(timeout=300))
    await _kill_when(lab, process, point)
    assert await install == 0, lab.out.getvalue()


async def _kill_when(lab: Lab, process: str, point: str) -> None:
    """SIGKILL `process` once phase `point` runs (or has run), and start it again."""
    await lab.wait_status(lambda d: lab.phase(d, point)["status"] in ("Running", "Succeeded"), 180, f"phase {point}")
    if process.startswith("agent:"):
        host = process.split(":", 1)[1]
        pid = lab.sup.pids()["agents"][host]
        _kill(pid)
        lab.sup.ensure_agents(lab.info, lab.plan, only=[host])  # a new process on the same journal
        assert lab.sup.pids()["agents"][host] != pid
    else:
        pid = lab.sup.pids()["services"][process]
        _kill(pid)
        lab.sup.ensure_services(lab.info, only=(process,))  # a new process, same Redis and streams
        assert lab.sup.pids()["services"][process] != pid


def _check_end(lab: Lab) -> None:
    counts = lab.executions()
    assert counts, "agents recorded no executions"
    twice = {cid: n for cid, n in counts.items() if n > 1}
    assert not twice, f"completed commands ran more than once: {twice}"
    dead = [name for name, pid in lab.sup.pids()["services"].items() if not pid_alive(pid)]
    assert not dead, f"services not running at the end: {dead}"


async def test_each_process_killed_in_turn_during_one_install(lab):
    """The fast table in one install (its points are in phase order): every service and an
    agent SIGKILLed once, each at its point, and started again."""
    install = asyncio.create_task(lab.install(timeout=300))
    for process, point in FAST:
        await _kill_when(lab, process, point)
        assert not install.done(), f"the install ended before {process} was killed at {point}"
    assert await install == 0, lab.out.getvalue()
    doc = await lab.status()
    assert doc is not None and doc["status"] == "Succeeded"
    _check_end(lab)


@pytest.mark.soak  # one install per kill; CI kills them all in one install (above)
@pytest.mark.parametrize(("process", "point"), FAST, ids=[f"{p}@{pt}" for p, pt in FAST])
async def test_killed_and_restarted_mid_install(lab, process, point):
    await _kill_at(lab, process, point)
    doc = await lab.status()
    assert doc is not None and doc["status"] == "Succeeded"
    _check_end(lab)


@pytest.mark.soak
@pytest.mark.parametrize(("process", "point"), SLOW, ids=[f"{p}@{pt}" for p, pt in SLOW])
async def test_killed_and_restarted_mid_install_everywhere(lab, process, point):
    await _kill_at(lab, process, point)
    _check_end(lab)


async def test_planner_killed_before_it_takes_the_request(lab):
    """The request waits in its stream while no planner runs, and is taken after the restart."""
    nc = await connect_nats(lab.access)  # the operator's identity
    try:
        js = nc.jetstream()
        await lab.sup.wait_services_ready(js)  # streams declared, every consumer there
        _kill(lab.sup.pids()["services"]["planner"])
        before = (await js.stream_info("BKE_COMMANDS")).state.messages
        install = asyncio.create_task(lab.install(timeout=300))

        async def stored() -> bool:
            return (await js.stream_info("BKE_COMMANDS")).state.messages > before

        deadline = asyncio.get_running_loop().time() + 30
        while not await stored():
            assert asyncio.get_running_loop().time() < deadline, "the request never reached its stream"
            await asyncio.sleep(0.05)  # polling the stream under a deadline
    finally:
        await nc.close()
    assert await lab.status() is None  # stored, and nobody planned it while no planner ran
    lab.sup.ensure_services(lab.info, only=("planner",))
    assert await install == 0, lab.out.getvalue()
    _check_end(lab)
