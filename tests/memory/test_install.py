"""An install's flow in memory: the planner, certs, renderer and dispatcher from their composition
roots and a fleet of agents; a node's failed step, then the operator's retry; an agent that
trusts another key refuses, and the install fails naming it."""
from __future__ import annotations

import uuid

import pytest

from bke.contracts import INSTALL_CLUSTER, InstallCluster
from bke.contracts.install import RETRY_INSTALL, RetryInstall, install_subject
from bke.contracts.statuses import FinishedStatus
from bke.core.secrets.signing import CommandSigner

from .lab import Fault, MemoryLab, hostnames, spec

pytestmark = pytest.mark.memory


async def test_install_succeeds_every_command_once(lab: MemoryLab) -> None:
    done = await lab.install("mem1", spec("mem1"))
    assert done["status"] == FinishedStatus.SUCCEEDED, done
    # node-env x4, certs x4, etcd x3, init x1, join x2, workers x1, health x4: each ran once
    assert lab.executed() == 19 and sum(a.replayed for a in lab.agents.values()) == 0


async def test_a_failed_step_fails_the_install_and_a_retry_finishes_it(lab: MemoryLab) -> None:
    fault = Fault("node1", "systemd", match="kubelet", message="kubelet did not start")
    failed = await lab.install("mem2", spec("mem2"), [fault])
    assert failed["status"] == FinishedStatus.FAILED and failed["node"] == "node1", failed
    assert failed["phase"] == "node-env" and "kubelet did not start" in failed["message"], failed
    assert fault.times == 0
    mark = await lab.send(RETRY_INSTALL, RetryInstall(request_id=failed["requestId"], cluster="mem2"))
    done = await lab.wait(install_subject("mem2", "finished"), start=mark)
    assert done["status"] == FinishedStatus.SUCCEEDED, done
    assert lab.agents["node1"].executed >= 2  # the failed command's node ran the retry's


async def test_agents_that_trust_another_key_refuse_and_the_status_says_why(lab: MemoryLab) -> None:
    text = spec("mem3")
    await lab.add_agents("mem3", hostnames(text), verify_key=CommandSigner.generate().verify_key)
    mark = await lab.send(INSTALL_CLUSTER, InstallCluster(request_id=uuid.uuid4().hex, spec=text))
    refused = await lab.wait("bke.v1.agent.mem3.*.refused", start=mark)
    assert "signature" in refused["reason"] or "key" in refused["reason"], refused
    await lab.router.quiet()
    doc = await lab.status("mem3")
    # a refused command stays sent: the phase waits and the status names the refusal
    assert doc["status"] == "Running" and doc["refusals"]["count"] >= 1, doc
    assert lab.executed() == 0
