"""The agent's side of the node environment: the host backend admits exactly the new files,
binaries and programs (and still refuses their neighbours), masks a unit through systemctl, and
judges the arch and kernel checks; the lab records the kernel and swap programs and the mask
instead of running them, and reports (without judging) the machine it shares."""
from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from bke.core.artefacts import node_artefacts
from bke.contracts.agent import AgentCommand, StepResult
from bke.contracts.agent_steps import CheckHost, RunProgram, Step, SystemdUnit
from bke.core.node_kernel import MODULES_FILE, SYSCTL_FILE
from bke.core.plan import plan_spec_text
from bke_agent import AgentIdentity, Executor, HostBackend, LabBackend, LabLayout
from bke_agent.backends.checks import NodeFacts, run_checks
from bke_agent.backends.paths import HOST_WRITE_DIRS, PathPolicy
from bke_agent.backends.programs import HOST_PROGRAMS, resolve_program
from bke_agent.errors import PathRefused, PermanentStepError, StepError

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
SEED = plan_spec_text(open("examples/seed-3m1w.yaml").read()).plan


async def _run(backend: HostBackend | LabBackend, *steps: Step) -> list[StepResult]:
    cmd = AgentCommand(command_id="c/p/n/0", cluster="c", node="n", phase="p", issued_at="t", steps=list(steps))
    return (await Executor(backend, AgentIdentity.ephemeral(), now=lambda: NOW).run(cmd)).steps


def test_the_write_allow_list_admits_every_artefact_and_host_file_and_nothing_beside_them(tmp_path: Path) -> None:
    policy = PathPolicy(tmp_path, HOST_WRITE_DIRS)
    dests = {a.dest for arch in ("amd64", "arm64") for a in node_artefacts(SEED.spec.config, arch, registers=True)}
    for path in sorted(d for d in dests if d) + [MODULES_FILE, SYSCTL_FILE, "/etc/crictl.yaml"]:
        assert policy.local(path).is_relative_to(tmp_path.resolve()), path
    for bad in ("/etc/modules-load.d/evil.conf", "/etc/sysctl.d/10-evil.conf", "/etc/sysctl.conf",
                "/etc/crictl.yaml.d/x", "/usr/local/sbin/evil", "/usr/local/sbin/runc-evil", "/usr/local/bin/crictl2",
                "/opt/cni/evil", "/opt/cni/bin2/x", "/usr/local/bin/containerd-shim-evil", "/etc/fstab",
                "/etc/systemd/system/swap.target"):
        with pytest.raises(PathRefused, match="outside the directories"):
            policy.local(bad)


def test_swapoff_is_admitted_and_other_swap_or_module_tools_are_not(tmp_path: Path) -> None:
    assert {"modprobe", "sysctl", "swapoff"} <= set(HOST_PROGRAMS)
    fake = tmp_path / "sbin"
    fake.mkdir()
    for name in ("swapoff", "swapon", "insmod", "rmmod", "mkswap", "systemctl"):
        (fake / name).write_text("#!/bin/sh\nexit 0\n")
        (fake / name).chmod(0o755)
    assert resolve_program(["swapoff", "-a"], {}, dirs=[str(fake)]) == [str(fake / "swapoff"), "-a"]
    for name in ("swapon", "insmod", "rmmod", "mkswap", "systemctl"):  # units go through SystemdUnit steps only
        with pytest.raises(PermanentStepError, match="not a program this agent runs"):
            resolve_program([name], {}, dirs=[str(fake)])


async def test_the_host_masks_a_unit_through_systemctl(tmp_path: Path) -> None:
    fake = tmp_path / "systemctl"
    log = tmp_path / "log"
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> {log}\n')
    fake.chmod(0o755)
    backend = HostBackend(tmp_path / "root", systemctl=str(fake))
    [res] = await _run(backend, SystemdUnit(id="m", unit="swap.target", action="mask"))
    assert res.status == "Succeeded" and log.read_text() == "mask swap.target\n"


@pytest.mark.parametrize(("machine", "arch", "ok"), [
    ("x86_64", "amd64", True), ("aarch64", "arm64", True), ("x86_64", "arm64", False), ("aarch64", "amd64", False),
])
def test_host_arch_check(tmp_path: Path, machine: str, arch: str, ok: bool) -> None:
    facts = NodeFacts(tmp_path, "0.0.0.0", lab=False, machine=machine, kernel="6.1.0")
    step = CheckHost(id="pre", checks=["arch"], arch=arch)  # type: ignore[arg-type]
    if ok:
        assert f"ok arch: {machine} ({arch})" in str(run_checks(facts, step).stdout)
    else:
        with pytest.raises(StepError, match=f"this machine is {machine}, the spec says {arch}"):
            run_checks(facts, step)


@pytest.mark.parametrize(("kernel", "ok"), [
    ("5.13.0", True), ("6.8.0-45-generic", True), ("5.12.19", False), ("4.19.90-2102.2.0.0062.oe1.x86_64", False),
    ("5.10.0-136.12.0.86.oe2203sp1.x86_64", False),
])
def test_host_kernel_version_check(tmp_path: Path, kernel: str, ok: bool) -> None:
    facts = NodeFacts(tmp_path, "0.0.0.0", lab=False, machine="x86_64", kernel=kernel)
    step = CheckHost(id="pre", checks=["kernel-version"], min_kernel="5.13")
    if ok:
        assert f"{kernel} >= 5.13" in str(run_checks(facts, step).stdout)
    else:
        with pytest.raises(StepError, match=f"kernel {kernel} is older than 5.13"):
            run_checks(facts, step)


async def test_the_lab_records_kernel_and_swap_work_and_reports_the_shared_machine(tmp_path: Path) -> None:
    root = tmp_path / "hosts/n1"
    root.mkdir(parents=True)
    backend = LabBackend(root, "127.0.0.1")
    steps = await _run(
        backend,
        CheckHost(id="pre", checks=["arch", "kernel-version"], arch="arm64", min_kernel="99.0"),
        RunProgram(id="kernel:modprobe", argv=["modprobe", "-a", "overlay", "br_netfilter"]),
        RunProgram(id="kernel:sysctl", argv=["sysctl", "-p", SYSCTL_FILE]),
        RunProgram(id="swap:off", argv=["swapoff", "-a"]),
        SystemdUnit(id="systemd:mask-swap", unit="swap.target", action="mask"),
    )
    assert [s.status for s in steps] == ["Succeeded"] * 5
    # not judged (one machine for every lab node), and says so
    assert "arch: lab node" in steps[0].stdout and "the spec says arm64: not checked" in steps[0].stdout
    assert "needs 99.0: not checked" in steps[0].stdout
    assert all("simulated" in s.stdout for s in steps[1:4])
    layout = LabLayout(root)
    logged = [json.loads(line) for line in layout.programs_log.read_text().splitlines()]
    assert [e["argv"][0] for e in logged] == ["modprobe", "sysctl", "swapoff"]
    assert json.loads(layout.unit_file("swap.target").read_text())["masked"] is True


OLD_KERNEL_STEPS = (
    "write:/etc/modules-load.d/bke-old-kernel.conf", "kernel:modprobe-nf_conntrack_ipv4")


@pytest.mark.parametrize(("kernel", "runs"), [
    ("3.10.0-1160.el7.x86_64", True), ("4.18.0-553.el8_10.x86_64", True),  # nf_conntrack_ipv4 there
    ("4.19.0-27-amd64", False), ("5.15.0-91-generic", False), ("6.8.0", False),  # folded into nf_conntrack
])
async def test_the_old_kernel_conntrack_steps_run_exactly_on_kernels_before_4_19(
        tmp_path: Path, kernel: str, runs: bool) -> None:
    """The node-env steps of an ipvs node as the dispatcher builds them, run by an agent on that
    kernel (the lab backend records programs instead of running them)."""
    from bke.core.node_steps import kernel_steps

    docs = open("examples/seed-3m1w.yaml").read().replace("kubernetesVersion:", "kubeProxy: {mode: ipvs}\n      kubernetesVersion:", 1)
    plan = plan_spec_text(docs).plan
    assert plan is not None and plan.spec.config.kube_proxy.mode == "ipvs"
    steps = [s for s in kernel_steps(plan, plan.node("node1")) if s.id != "kernel:sysctl"]
    assert [s.id for s in steps][1:] == list(OLD_KERNEL_STEPS) and all(s.kernel_below == "4.19" for s in steps[1:])
    root = tmp_path / "hosts/node1"
    root.mkdir(parents=True)
    cmd = AgentCommand(command_id="c/p/n/0", cluster="c", node="n", phase="p", issued_at="t", steps=steps)
    executor = Executor(LabBackend(root, "127.0.0.1"), AgentIdentity.ephemeral(), now=lambda: NOW, kernel=lambda: kernel)
    results = (await executor.run(cmd)).steps
    assert results[0].status == "Succeeded"  # the kernel-independent modprobe: always
    assert [r.status for r in results[1:]] == (["Succeeded"] * 2 if runs else ["Skipped"] * 2)
    logged = [json.loads(line)["argv"] for line in LabLayout(root).programs_log.read_text().splitlines()]
    assert (["modprobe", "nf_conntrack_ipv4"] in logged) is runs
    persisted = root / "etc/modules-load.d/bke-old-kernel.conf"
    assert persisted.is_file() is runs
    if runs:
        assert [ln for ln in persisted.read_text().splitlines() if not ln.startswith("#")] == ["nf_conntrack_ipv4"]
    else:
        assert f"kernel {kernel} is 4.19 or newer: not needed" in results[1].stdout


async def test_an_unreadable_kernel_fails_the_old_kernel_step_and_says_why(tmp_path: Path) -> None:
    root = tmp_path / "hosts/n1"
    root.mkdir(parents=True)
    step = RunProgram(id="kernel:modprobe-nf_conntrack_ipv4", argv=["modprobe", "nf_conntrack_ipv4"], kernel_below="4.19")
    cmd = AgentCommand(command_id="c/p/n/0", cluster="c", node="n", phase="p", issued_at="t", steps=[step])
    executor = Executor(LabBackend(root, "127.0.0.1"), AgentIdentity.ephemeral(), now=lambda: NOW, kernel=lambda: "weird")
    [res] = (await executor.run(cmd)).steps
    assert res.status == "Failed" and "cannot read the kernel version from 'weird'" in res.stderr


def test_the_host_admits_the_old_kernel_modules_file_and_reset_removes_it(tmp_path: Path) -> None:
    from bke.core.node_kernel import OLD_KERNEL_MODULES_FILE
    from bke_agent.reset import RESET_TABLE

    assert PathPolicy(tmp_path, HOST_WRITE_DIRS).local(OLD_KERNEL_MODULES_FILE).is_relative_to(tmp_path.resolve())
    assert OLD_KERNEL_MODULES_FILE in {p for p, _, _ in RESET_TABLE}


def test_the_added_optional_fields_are_absent_from_bodies_that_do_not_use_them() -> None:
    """An agent (or certs service) of the previous release forbids unknown fields: every step
    without kernel_below, and every RenewCerts without a release, is the body it already reads."""
    from bke.contracts.certs import RenewCerts

    body = AgentCommand(command_id="c/p/n/0", cluster="c", node="n", phase="p", issued_at="t",
                        steps=[RunProgram(id="r", argv=["modprobe", "-a", "overlay"])]).to_bytes()
    assert b"kernelBelow" not in body and b'"kernelBelow":"4.19"' in RunProgram(
        id="r", argv=["x"], kernel_below="4.19").to_bytes()
    assert b"kubernetesVersion" not in RenewCerts(request_id="r", cluster="c", names=["all"]).to_bytes()
    again = AgentCommand.model_validate_json(body)
    assert again.steps[0].kernel_below is None and again.to_bytes() == body
