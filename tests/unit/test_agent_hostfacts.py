"""What an agent reports about its host on each heartbeat: the cgroup version, told as runc
tells it (a cgroup2 filesystem at /sys/fs/cgroup), unknown where there is no /sys/fs/cgroup."""
from __future__ import annotations

from pathlib import Path

from bke.contracts.agent import AgentHeartbeat
from bke_agent.hostfacts import cgroup_version


def test_cgroup_version_from_the_node_tree(tmp_path: Path) -> None:
    assert cgroup_version(tmp_path) is None  # a lab node's tree: not known
    base = tmp_path / "sys/fs/cgroup"
    (base / "unified").mkdir(parents=True)  # hybrid: cgroup2 only under unified/, the kubelet sees v1
    assert cgroup_version(tmp_path) == 1
    (base / "cgroup.controllers").write_text("cpu memory\n")
    assert cgroup_version(tmp_path) == 2


def test_the_heartbeat_carries_it_and_an_older_agents_heartbeat_still_parses() -> None:
    hb = AgentHeartbeat(cluster="c", node="n", agent_id="a", at="t", cgroup_version=1)
    assert b'"cgroupVersion":1' in hb.to_bytes()
    assert AgentHeartbeat.model_validate_json(b'{"cluster":"c","node":"n","agentId":"a","at":"t"}').cgroup_version is None
