"""`bke apply` of a changed flag in memory: the controller-manager rolled master by master and
nothing sent to the worker; a master that fails its roll fails the apply naming it; an apply of
a cluster this deployment does not have is refused naming it."""
from __future__ import annotations

import pytest

from bke.contracts.apply import APPLY_CLUSTER, APPLY_REJECTED, ApplyCluster
from bke.contracts.statuses import FinishedStatus

from .lab import Fault, MemoryLab, spec

pytestmark = pytest.mark.memory
CERTS = "      certificates: {keyAlgorithm: ECDSA-P256}\n"
FLAG = CERTS + '      controllerManager:\n        extraArgs: {kube-api-qps: "80"}\n'  # as tests/e2e/test_lab_apply.py


def _flagged(cluster: str) -> str:
    text = spec(cluster)
    assert CERTS in text
    return text.replace(CERTS, FLAG)


async def test_a_changed_flag_rolls_the_masters_only(lab: MemoryLab) -> None:
    assert (await lab.install("mema", spec("mema")))["status"] == FinishedStatus.SUCCEEDED
    before = {n: a.executed for n, a in lab.agents.items()}
    done = await lab.apply("mema", _flagged("mema"))
    assert done["status"] == "Succeeded", done
    assert all(lab.agents[m].executed > before[m] for m in ("master1", "master2", "master3"))
    assert lab.agents["node1"].executed == before["node1"]


async def test_a_master_that_fails_its_roll_fails_the_apply(lab: MemoryLab) -> None:
    assert (await lab.install("memb", spec("memb")))["status"] == FinishedStatus.SUCCEEDED
    lab.fail(Fault("master2", "replace_files", times=9))
    done = await lab.apply("memb", _flagged("memb"))
    assert done["status"] == "Failed" and "master2" in done["message"], done


async def test_an_apply_of_an_unknown_cluster_is_refused_naming_it(lab: MemoryLab) -> None:
    mark = await lab.send(APPLY_CLUSTER, ApplyCluster(request_id="apply-x", cluster="nowhere", spec=_flagged("nowhere")))
    refused = await lab.wait(APPLY_REJECTED, lambda d: d["requestId"] == "apply-x", start=mark)
    assert "nowhere" in refused["message"], refused
