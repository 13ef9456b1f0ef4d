"""An install's flow in memory: the planner, certs, renderer and dispatcher from their composition
roots, a fleet of agents; a node's failed step, then the operator's retry."""
from __future__ import annotations

import uuid

import pytest

from bke.contracts import INSTALL_CLUSTER, InstallCluster
from bke.contracts.install import install_subject
from bke.contracts.statuses import FinishedStatus
from bke.core.plan import plan_spec_text

from .lab import MemoryLab, spec

pytestmark = pytest.mark.memory
SEED = "examples/seed-3m1w.yaml"


async def test_install_succeeds(lab: MemoryLab) -> None:
    text = spec(SEED, "mem1")
    plan = plan_spec_text(text).plan
    await lab.add_agents("mem1", [n.hostname for n in plan.nodes])
    mark = await lab.send(INSTALL_CLUSTER, InstallCluster(request_id=uuid.uuid4().hex, spec=text))
    done = await lab.wait(install_subject("mem1", "finished"), start=mark, timeout=30)
    assert done["status"] == FinishedStatus.SUCCEEDED, done
