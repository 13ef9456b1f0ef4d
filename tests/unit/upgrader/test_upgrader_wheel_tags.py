"""Each node is sent only the agent wheels its Python and platform install, by pip's tag rules
(bke_upgrader.wheel_tags): the wheelhouse of a bundle (every Python, both arches) cut down per
node to one wheel per distribution; a node with no wheel for some distribution is named."""
from __future__ import annotations

import sys

import pytest
from packaging import tags

from bke.contracts.agent import AgentRuntime
from bke.contracts.agent_steps import AgentWheel
from bke_upgrader.agent_release import ReleaseError, node_updates, release_from
from bke_upgrader.wheel_tags import WheelSetError, node_platforms, node_tags, select_wheels

SHA = "a" * 64
# a bundle's wheelhouse as `bke bundle build` makes it for 3.11 and 3.12, amd64 and arm64
NAMES = (
    "bke-0.2.0-py3-none-any.whl",
    "wheels/pydantic_core-2.50.5-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
    "wheels/pydantic_core-2.50.5-cp311-cp311-manylinux_2_17_aarch64.manylinux2014_aarch64.whl",
    "wheels/pydantic_core-2.50.5-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
    "wheels/pydantic_core-2.50.5-cp312-cp312-manylinux_2_17_aarch64.manylinux2014_aarch64.whl",
    "wheels/cryptography-50.0.2-cp311-abi3-manylinux_2_28_x86_64.whl",
    "wheels/cryptography-50.0.2-cp311-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
    "wheels/cryptography-50.0.2-cp311-abi3-manylinux_2_28_aarch64.whl",
    "wheels/nats_py-2.16.0-py3-none-any.whl",
)
WHEELS = tuple(AgentWheel(url=f"http://repo:40080/agent/0.2.0/{n}", sha256=SHA) for n in NAMES)


def _rt(python: str = "3.11", machine: str = "x86_64", libc: str = "glibc", libc_version: str = "2.36",
        implementation: str = "cpython") -> AgentRuntime:
    return AgentRuntime(agent_version="0.1.0", python=python, machine=machine, libc=libc,  # type: ignore[arg-type]
                        libc_version=libc_version, implementation=implementation)


def _names(wheels: tuple[AgentWheel, ...]) -> list[str]:
    return [w.url.rsplit("/", 1)[1] for w in wheels]


def test_a_node_gets_one_wheel_per_distribution_for_its_python_and_arch() -> None:
    assert _names(select_wheels(WHEELS, _rt())) == [
        "bke-0.2.0-py3-none-any.whl",
        "pydantic_core-2.50.5-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
        # glibc 2.36 takes manylinux_2_28 before 2014 (the more specific tag first, as pip)
        "cryptography-50.0.2-cp311-abi3-manylinux_2_28_x86_64.whl",
        "nats_py-2.16.0-py3-none-any.whl"]
    arm = _names(select_wheels(WHEELS, _rt("3.12", "aarch64")))
    assert arm[1] == "pydantic_core-2.50.5-cp312-cp312-manylinux_2_17_aarch64.manylinux2014_aarch64.whl"
    assert arm[2] == "cryptography-50.0.2-cp311-abi3-manylinux_2_28_aarch64.whl"  # abi3 of 3.11 serves 3.12


def test_an_older_glibc_takes_the_older_manylinux_and_a_missing_one_is_named() -> None:
    # glibc 2.17 (EL7): manylinux_2_28 does not install there, 2014 does
    assert "cryptography-50.0.2-cp311-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl" in \
        _names(select_wheels(WHEELS, _rt(libc_version="2.17")))
    # cp313: no pydantic-core of it here; cryptography's abi3 wheel of 3.11 serves 3.13
    with pytest.raises(WheelSetError, match=r"^no wheel of pydantic-core installs on cpython 3.13 x86_64 glibc 2.36$"):
        select_wheels(WHEELS, _rt("3.13"))
    # on musl none of the manylinux wheels installs
    with pytest.raises(WheelSetError, match=r"pydantic-core, cryptography installs on .* musl 1.2"):
        select_wheels(WHEELS, _rt(libc="musl", libc_version="1.2"))


def test_the_platform_list_follows_packaging_manylinux_and_musllinux_orders() -> None:
    x86 = node_platforms(_rt(libc_version="2.17"))
    assert x86[:3] == ["linux_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"]
    assert x86[-2:] == ["manylinux_2_5_x86_64", "manylinux1_x86_64"]  # x86 goes down to glibc 2.5
    assert node_platforms(_rt(machine="aarch64", libc_version="2.18"))[-2:] == ["manylinux_2_17_aarch64",
                                                                                 "manylinux2014_aarch64"]
    assert node_platforms(_rt(libc="musl", libc_version="1.2")) == [
        "linux_x86_64", "musllinux_1_2_x86_64", "musllinux_1_1_x86_64", "musllinux_1_0_x86_64"]
    assert node_platforms(_rt(libc="", libc_version="")) == ["linux_x86_64"]  # libc not known: nothing more


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="packaging's own list is this Linux host's")
def test_for_this_host_the_tags_are_the_ones_packaging_gives_its_own_interpreter() -> None:
    from bke_agent.hostfacts import agent_runtime

    rt = agent_runtime("0.1.0")
    ours = node_tags(rt)
    theirs = list(tags.sys_tags())
    assert ours == theirs


def test_each_node_gets_its_own_step_or_the_reason_it_has_none() -> None:
    index = {"agent": {"dir": "agent/0.2.0"}, "files": [
        {"path": f"agent/0.2.0/{n}", "sha256": SHA} for n in NAMES]}
    rel = release_from(index, "http://repo:40080")
    ups = node_updates(rel, {"w1": _rt(), "w2": _rt("3.12", "aarch64"), "old": None, "w3": _rt("3.13")}, 60.0)
    assert len(ups.step("w1").wheels) == 4 and ups.step("w1").confirm_timeout_s == 60.0
    assert ups.step("w1").wheels != ups.step("w2").wheels
    # an agent that reported nothing: all wheels would not install (pip refuses another platform's)
    with pytest.raises(ReleaseError, match="the node's agent has not reported its Python and platform"):
        ups.step("old")
    with pytest.raises(ReleaseError, match="the agent release 0.2.0: no wheel of pydantic-core"):
        ups.step("w3")
    # what refuses the upgrade request up front: every node without a step, named
    assert ups.refusal().startswith("old: the agent release 0.2.0: the node's agent has not reported")
    assert "; w3: the agent release 0.2.0: no wheel of pydantic-core" in ups.refusal()
    assert ups.refusal(most=1).endswith("(and 1 more node(s))")
    assert node_updates(rel, {"w1": _rt()}, 60.0).refusal() == ""


def test_a_file_name_that_is_not_a_wheels_is_named() -> None:
    bad = (AgentWheel(url="http://repo/agent/0.2.0/wheels/not-a-wheel.whl", sha256=SHA),)
    with pytest.raises(WheelSetError, match="not-a-wheel.whl: not a wheel's file name"):
        select_wheels(bad, _rt())
