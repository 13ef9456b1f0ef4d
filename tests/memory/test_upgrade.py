"""An upgrade in memory (the upgrader's run, its batches of signed commands answered by the
agents, the certs service's renewal inside it), one whose worker fails and is left behind, and
`bke retry` of that worker."""
from __future__ import annotations

import uuid

import pytest

from bke.contracts.statuses import FinishedStatus
from bke.contracts.upgrade import RETRY_UPGRADE, UPGRADE_CLUSTER, RetryUpgrade, UpgradeCluster, upgrade_subject

from .lab import Fault, MemoryLab, spec

pytestmark = pytest.mark.memory
TO, ETCD_TO, CONTAINERD_TO = "1.34.1", "3.5.2", "2.2.0"  # as tests/e2e/test_lab_upgrade.py
ENDED = ("Succeeded", "Failed")


async def _ended(lab: MemoryLab, cluster: str, mark: int) -> dict:
    done = await lab.wait(upgrade_subject(cluster), lambda d: d["upgrade"]["status"] in ENDED, start=mark)
    return done["upgrade"]


async def _upgrade(lab: MemoryLab, cluster: str) -> dict:
    await lab.heartbeats()
    req = UpgradeCluster(request_id=uuid.uuid4().hex, cluster=cluster, kubernetes_version=TO, etcd_version=ETCD_TO,
                         containerd_version=CONTAINERD_TO)
    return await _ended(lab, cluster, await lab.send(UPGRADE_CLUSTER, req))


async def test_an_upgrade_moves_every_node(lab: MemoryLab) -> None:
    assert (await lab.install("memu", spec("memu")))["status"] == FinishedStatus.SUCCEEDED
    before = {n: a.executed for n, a in lab.agents.items()}
    upgrade = await _upgrade(lab, "memu")
    assert upgrade["status"] == "Succeeded", upgrade
    assert all(a.executed > before[n] for n, a in lab.agents.items())  # every node upgraded
    doc = await lab.status("memu")
    assert doc["status"] == "Succeeded", doc


async def test_a_failed_worker_fails_the_upgrade_and_a_retry_of_it_finishes(lab: MemoryLab) -> None:
    assert (await lab.install("memv", spec("memv")))["status"] == FinishedStatus.SUCCEEDED
    fault = Fault("node1", "replace_files", message="disk full", times=1)
    lab.fail(fault)
    upgrade = await _upgrade(lab, "memv")
    assert upgrade["status"] == "Failed" and "node1" in upgrade["message"], upgrade
    assert fault.times == 0
    masters = {n: lab.agents[n].executed for n in ("master1", "master2", "master3")}
    mark = await lab.send(RETRY_UPGRADE, RetryUpgrade(request_id=uuid.uuid4().hex, cluster="memv", nodes=["node1"]))
    retried = await _ended(lab, "memv", mark)
    assert retried["status"] == "Succeeded", retried
    assert {n: lab.agents[n].executed for n in masters} == masters  # only the worker moved
