"""What an agent reports about its host on each heartbeat: the cgroup version, told as runc
tells it (a cgroup2 filesystem at /sys/fs/cgroup), unknown where there is no /sys/fs/cgroup;
its runtime (its version, Python, machine and C library: what an update's wheels must fit)."""
from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from bke.contracts.agent import AgentHeartbeat, AgentRuntime
from bke_agent.hostfacts import agent_runtime, cgroup_version, musl_version


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


def test_the_runtime_is_this_interpreter_and_its_c_library() -> None:
    rt = agent_runtime("0.1.1")
    assert rt.agent_version == "0.1.1"
    assert rt.python == f"{sys.version_info.major}.{sys.version_info.minor}"
    assert rt.implementation == sys.implementation.name and rt.machine == platform.machine()
    name, version = platform.libc_ver()
    if name == "glibc":  # this host: the version packaging's manylinux tags are made from
        assert rt.libc == "glibc" and version.startswith(rt.libc_version)


def test_musls_version_is_read_from_its_loaders_banner() -> None:
    banner = "musl libc (x86_64)\nVersion 1.2.4\nDynamic Program Loader\nUsage: ld [options]\n"
    assert musl_version(banner) == "1.2"  # major.minor: what musllinux tags carry
    assert musl_version("ld.so: no such thing\n") == ""


def test_the_heartbeat_carries_the_runtime_and_one_without_it_still_parses() -> None:
    hb = AgentHeartbeat(cluster="c", node="n", agent_id="a", at="t", runtime=agent_runtime("0.1.0"))
    doc = json.loads(hb.to_bytes())
    assert doc["runtime"]["agentVersion"] == "0.1.0" and doc["runtime"]["python"]
    assert AgentHeartbeat.model_validate_json(b'{"cluster":"c","node":"n","agentId":"a","at":"t"}').runtime is None
    with pytest.raises(ValidationError):  # a platform that could inject into a tag is refused
        AgentRuntime(agent_version="0.1.0", python="3.11", machine="x86_64-none-any")
