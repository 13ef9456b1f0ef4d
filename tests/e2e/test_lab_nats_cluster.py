"""A lab install against a 3-node NATS cluster, every stream with 3 replicas, and one node
SIGKILLed in the middle: the services and agents move to the other nodes, the
streams keep a quorum of two, and the install finishes with nothing dead-lettered and no
completed command run twice (the agents' own execution logs)."""
from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from bke.adapters.bus.connect import connect_nats
from bke.adapters.bus.streams import BUCKETS, STREAMS
from bke.lab.ha_runtime import HaRuntime
from bke.lab.supervisor import LabSupervisor
from bke.adapters.runtime.processes import pid_alive, poll_until
from tests.e2e.lab_helpers import Lab

pytestmark = pytest.mark.e2e  # the cluster's streams alone: tests/integration/test_stream_replicas.py
SEED = "examples/seed-3m1w.yaml"


@pytest.fixture
def lab(tmp_path):
    workdir = tmp_path / "lab"
    try:
        LabSupervisor(workdir, nats_cluster=3).ensure_runtime()  # the work directory keeps the choice
        lab = Lab(workdir, Path(SEED)).start()
        yield lab
    finally:
        # by PID, even when the start failed half-way: nothing of this lab outlives the test
        LabSupervisor(workdir).down()


async def _stream_facts(lab: Lab) -> dict[str, tuple[int, str]]:
    """Each stream's (replicas, leader), and the object buckets' replicas, over a fresh connection."""
    nc = await connect_nats(lab.access)
    try:
        js = nc.jetstream()
        await lab.sup.wait_services_ready(js)
        names = [d.name for d in STREAMS] + [f"OBJ_{b}" for b, _ in BUCKETS]
        infos = [await js.stream_info(n) for n in names]
        return {i.config.name: (i.config.num_replicas, i.cluster.leader if i.cluster else "") for i in infos}
    finally:
        await nc.close()


async def _dead_letters(lab: Lab) -> int:
    nc = await connect_nats(lab.access)
    try:
        return (await nc.jetstream().stream_info("BKE_DEADLETTER")).state.messages
    finally:
        await nc.close()


async def test_install_finishes_when_a_nats_node_is_killed_mid_install(lab):
    runtime = lab.sup.runtime
    assert isinstance(runtime, HaRuntime) and len(lab.info.nats_url.split(",")) == 3
    facts = await _stream_facts(lab)
    assert {r for r, _ in facts.values()} == {3}, facts  # the services converged every stream to 3

    install = asyncio.create_task(lab.install(timeout=300))
    await lab.wait_status(lambda d: lab.phase(d, "etcd")["status"] in ("Running", "Succeeded"), 180, "phase etcd")
    cluster = runtime.cluster()
    # the node that leads the agents' stream: its loss forces a leader election mid-install
    victim = cluster.node_of_server(facts["BKE_AGENT"][1])
    pid = cluster.kill_node(victim, signal.SIGKILL)
    poll_until(lambda: True if not pid_alive(pid) else None, timeout=10, what=f"nats node {victim} to die")
    # the first answer after the kill: a dispatcher whose connection was on the killed node
    # answers again once it has reconnected (until then its status is unavailable)
    mid = await lab.wait_status(lambda d: True, 60, "the dispatcher's status after the kill")
    assert mid["status"] == "Running", "the fault came after the install, not in its middle"

    assert await install == 0, lab.out.getvalue()
    doc = await lab.status()
    assert doc is not None and doc["status"] == "Succeeded"
    assert all(n["status"] == "Succeeded" for n in doc["nodes"])
    counts = lab.executions()
    assert counts, "agents recorded no executions"
    twice = {cid: n for cid, n in counts.items() if n > 1}
    assert not twice, f"completed commands ran more than once: {twice}"
    assert await _dead_letters(lab) == 0
    after = await _stream_facts(lab)
    assert facts["BKE_AGENT"][1] not in {leader for _, leader in after.values()}  # led by the survivors
    dead = [name for name, p in lab.sup.pids()["services"].items() if not pid_alive(p)]
    assert not dead, f"services not running at the end: {dead}"
