"""The agent release the upgrade's `agents` step installs: read from a bundle's index (every
wheel under agent/<version>/ with the sha256 the index records), refused when incomplete, and
sent first in the agents step's command, before the check the new agent answers."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from bke.contracts.agent_steps import CheckHost, UpdateAgent
from bke.core.upgrade.node_commands import node_upgrade_steps
from bke_upgrader.agent_release import ReleaseError, load_release, release_from

from ..upgrade_helpers import SEED, plan_of

SHA = "a" * 64
INDEX = {"agent": {"dir": "agent/0.2.0", "pythons": ["3.11"]}, "files": [
    {"path": "agent/0.2.0/bke-0.2.0-py3-none-any.whl", "sha256": SHA},
    {"path": "agent/0.2.0/requirements.txt", "sha256": "b" * 64},
    {"path": "agent/0.2.0/wheels/nats_py-2.9.0-py3-none-any.whl", "sha256": "c" * 64},
    {"path": "agent/0.2.0/wheels/index.html", "sha256": "d" * 64},
    {"path": "kubernetes/v1.34.1/bin/linux/amd64/kubelet", "sha256": "e" * 64},
]}


def test_the_release_is_every_wheel_of_the_bundles_agent_with_its_digest() -> None:
    rel = release_from(INDEX, "http://repo:40080")
    assert rel.version == "0.2.0"
    assert [(w.url, w.sha256) for w in rel.wheels] == [
        ("http://repo:40080/agent/0.2.0/bke-0.2.0-py3-none-any.whl", SHA),
        ("http://repo:40080/agent/0.2.0/wheels/nats_py-2.9.0-py3-none-any.whl", "c" * 64)]


@pytest.mark.parametrize(("index", "why"), [
    ({"files": []}, "the bundle has no agent"),
    ({"agent": {"dir": "agent/0.2.0"}, "files": [INDEX["files"][2]]}, "no bke wheel under agent/0.2.0/"),
])
def test_an_incomplete_release_is_refused_saying_what_is_missing(index: dict, why: str) -> None:
    with pytest.raises(ReleaseError, match=why):
        release_from(index, "/srv/bundle")


async def test_a_bundle_directory_is_read_and_a_missing_index_named(tmp_path: Path) -> None:
    (tmp_path / "bundle.json").write_text(json.dumps(INDEX))
    rel = await load_release(str(tmp_path))
    assert rel.wheels[0].url == f"{tmp_path}/agent/0.2.0/bke-0.2.0-py3-none-any.whl"
    with pytest.raises(ReleaseError, match="cannot be read"):
        await load_release(str(tmp_path / "nowhere"))


def test_the_agents_step_installs_the_release_first_then_the_new_agent_answers_the_check() -> None:
    p = plan_of(SEED)
    rel = release_from(INDEX, "http://repo:40080")
    update = UpdateAgent(id="agents:update", version=rel.version, wheels=list(rel.wheels))
    steps = node_upgrade_steps("agents", "", p, p, "node1", {}, {}, {}, update=update)
    assert [type(s) for s in steps] == [UpdateAgent, CheckHost] and steps[0] is update
    assert [type(s) for s in node_upgrade_steps("agents", "", p, p, "node1", {}, {}, {})] == [CheckHost]
