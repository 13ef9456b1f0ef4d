"""A certificate rotation, a reset and a delete in memory, each after an install of its own, with
their failure paths."""
from __future__ import annotations

import pytest

from bke.contracts.certs import RENEW_CERTS, RenewCerts
from bke.contracts.reset import DELETE_OWNERS, RESET_CLUSTER, ResetCluster, removed_subject, reset_subject
from bke.contracts.rotation import rotation_subject
from bke.contracts.statuses import FinishedStatus, OperationStatus

from .lab import Fault, MemoryLab, spec

pytestmark = pytest.mark.memory
ENDED = (OperationStatus.SUCCEEDED, OperationStatus.FAILED)


async def _rotate(lab: MemoryLab, cluster: str, rid: str) -> dict:
    mark = await lab.send(RENEW_CERTS, RenewCerts(request_id=rid, cluster=cluster, names=["apiserver"]))
    done = await lab.wait(rotation_subject(cluster), lambda d: d["rotation"]["status"] in ENDED, start=mark)
    return done["rotation"]


async def test_a_rotation_renews_the_apiservers_master_by_master(lab: MemoryLab) -> None:
    assert (await lab.install("memc", spec("memc")))["status"] == FinishedStatus.SUCCEEDED
    before = lab.agents["node1"].executed
    rotation = await _rotate(lab, "memc", "rot-1")
    assert rotation["status"] == OperationStatus.SUCCEEDED, rotation
    assert sorted(n["hostname"] for n in rotation["nodes"]) == ["master1", "master2", "master3"]
    assert lab.agents["node1"].executed == before  # no apiserver there: nothing sent


async def test_a_rotation_whose_master_fails_stops_there_and_names_it(lab: MemoryLab) -> None:
    assert (await lab.install("memd", spec("memd")))["status"] == FinishedStatus.SUCCEEDED
    lab.fail(Fault("master2", "wait_health", times=9))
    rotation = await _rotate(lab, "memd", "rot-2")
    assert rotation["status"] == OperationStatus.FAILED and "master2" in rotation["message"], rotation


async def test_a_node_is_reset_then_the_cluster_deleted_by_every_service(lab: MemoryLab) -> None:
    assert (await lab.install("meme", spec("meme")))["status"] == FinishedStatus.SUCCEEDED
    mark = await lab.send(RESET_CLUSTER, ResetCluster(request_id="reset-1", cluster="meme", nodes=["node1"]))
    reset = (await lab.wait(reset_subject("meme"), lambda d: d["reset"]["status"] in ENDED, start=mark))["reset"]
    assert reset["status"] == OperationStatus.SUCCEEDED and [n["hostname"] for n in reset["nodes"]] == ["node1"], reset
    mark = await lab.send(RESET_CLUSTER, ResetCluster(request_id="delete-1", cluster="meme", delete=True))
    deleted = (await lab.wait(reset_subject("meme"), lambda d: d["reset"]["status"] in ENDED, start=mark))["reset"]
    assert deleted["status"] == OperationStatus.SUCCEEDED and deleted["delete"], deleted
    owners = set()
    for _ in DELETE_OWNERS:
        owners.add((await lab.wait(removed_subject("meme"), lambda d: d["service"] not in owners, start=mark))["service"])
    assert owners == set(DELETE_OWNERS)
    assert not [k async for k in lab.redis.scan_iter(match="bke:meme:*")]  # every record of it gone


async def test_a_reset_whose_node_fails_stops_as_failed_naming_it_and_a_delete_still_ends_it(lab: MemoryLab) -> None:
    assert (await lab.install("memf", spec("memf")))["status"] == FinishedStatus.SUCCEEDED
    lab.fail(Fault("node1", "reset_node", message="umount /var/lib/kubelet: device busy"))
    mark = await lab.send(RESET_CLUSTER, ResetCluster(request_id="reset-2", cluster="memf", nodes=["node1"]))
    reset = (await lab.wait(reset_subject("memf"), lambda d: d["reset"]["status"] in ENDED, start=mark))["reset"]
    assert reset["status"] == OperationStatus.FAILED, reset
    assert "node node1" in reset["message"] and "device busy" in reset["message"], reset
    assert [n["status"] for n in reset["nodes"]] == ["Failed"], reset
    # the failed reset freed the cluster's operation slot: a delete of the cluster (the node's
    # step no longer failing) runs to its end
    mark = await lab.send(RESET_CLUSTER, ResetCluster(request_id="delete-2", cluster="memf", delete=True))
    deleted = (await lab.wait(reset_subject("memf"), lambda d: d["reset"]["status"] in ENDED, start=mark))["reset"]
    assert deleted["status"] == OperationStatus.SUCCEEDED and deleted["delete"], deleted
