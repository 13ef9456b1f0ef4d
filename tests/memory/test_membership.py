"""Joins and removals in memory: `bke apply` of a spec with one more worker (the upgrader's
apply run swaps the plan and asks the dispatcher to join it, inside the apply's slot), a join
whose node fails, a direct removal of a worker, and a master's removal refused by name."""
from __future__ import annotations

import pytest

from bke.contracts.membership import JOIN_NODES_FINISHED, REMOVE_NODES, REMOVE_NODES_FINISHED, RemoveNodes
from bke.contracts.statuses import FinishedStatus

from .lab import Fault, MemoryLab, spec, worker

pytestmark = pytest.mark.memory


async def test_apply_joins_a_new_worker(lab: MemoryLab) -> None:
    assert (await lab.install("memj", spec("memj")))["status"] == FinishedStatus.SUCCEEDED
    before = {n: a.executed for n, a in lab.agents.items()}
    await lab.add_agents("memj", ["node2"])
    mark = len(lab.router.log)
    done = await lab.apply("memj", spec("memj") + worker("node2", "127.0.10.5"))
    assert done["status"] == "Succeeded", done
    joined = await lab.wait(JOIN_NODES_FINISHED, start=mark)
    assert joined["status"] == FinishedStatus.SUCCEEDED and [n["hostname"] for n in joined["nodes"]] == ["node2"]
    assert lab.agents["node2"].executed == 4  # node-env, certs, workers, health
    assert {n: lab.agents[n].executed for n in before} == before  # no other node commanded


async def test_a_join_whose_node_fails_fails_the_apply(lab: MemoryLab) -> None:
    assert (await lab.install("memf", spec("memf")))["status"] == FinishedStatus.SUCCEEDED
    await lab.add_agents("memf", ["node2"], [Fault("node2", "systemd", match="kubelet", times=9)])
    mark = len(lab.router.log)
    done = await lab.apply("memf", spec("memf") + worker("node2", "127.0.10.5"))
    assert done["status"] == "Failed", done
    joined = await lab.wait(JOIN_NODES_FINISHED, start=mark)
    assert joined["status"] == FinishedStatus.FAILED and joined["nodes"][0]["hostname"] == "node2", joined


async def test_a_worker_is_removed_and_a_master_is_refused_by_name(lab: MemoryLab) -> None:
    assert (await lab.install("memr", spec("memr")))["status"] == FinishedStatus.SUCCEEDED
    mark = await lab.send(REMOVE_NODES, RemoveNodes(request_id="rm-master", cluster="memr", nodes=["master1"]))
    refused = await lab.wait(REMOVE_NODES_FINISHED, lambda d: d["requestId"] == "rm-master", start=mark)
    assert refused["status"] == FinishedStatus.FAILED and refused["kind"] == "invalid", refused
    assert "master1" in refused["reason"], refused
    before = {n: a.executed for n, a in lab.agents.items()}
    mark = await lab.send(REMOVE_NODES, RemoveNodes(request_id="rm-node1", cluster="memr", nodes=["node1"]))
    removed = await lab.wait(REMOVE_NODES_FINISHED, lambda d: d["requestId"] == "rm-node1", start=mark)
    assert removed["status"] == FinishedStatus.SUCCEEDED, removed
    assert [n["hostname"] for n in removed["nodes"]] == ["node1"]
    # node1 reset (its agent ran the removal's command); no master commanded
    assert lab.agents["node1"].executed > before["node1"]
    assert all(lab.agents[m].executed == before[m] for m in ("master1", "master2", "master3"))
