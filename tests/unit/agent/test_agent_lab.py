"""The lab backend's simulations: units as state files (with their ExecStart checked), the
httpRepo placeholder and its checksum, programs run only from the node tree, failure on
purpose through a control file."""
from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from bke.contracts.agent import AgentCommand, StepResult
from bke.contracts.agent_steps import CheckHost, FetchFile, RunProgram, Step, SystemdUnit
from bke.lab.standins.binary_placeholder import lab_binary_bytes, lab_binary_sha256
from bke_agent import AgentIdentity, Executor, LabBackend, LabLayout

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
URL = "http://repo.example/containerd/v2.1.1/linux/amd64/containerd"


@pytest.fixture
def lab(tmp_path: Path) -> tuple[LabBackend, Path]:
    root = tmp_path / "hosts/n1"
    root.mkdir(parents=True)
    return LabBackend(root, "127.0.0.1"), root


async def _run(backend: LabBackend, *steps: Step) -> list[StepResult]:
    cmd = AgentCommand(command_id="c/p/n/0", cluster="c", node="n", phase="p", issued_at="t", steps=list(steps))
    return (await Executor(backend, AgentIdentity.ephemeral(), now=lambda: NOW).run(cmd)).steps


async def test_fetch_writes_the_placeholder_and_checks_its_sha(lab: tuple[LabBackend, Path]) -> None:
    backend, root = lab
    step = FetchFile(id="fetch:containerd", url=URL, path="/usr/local/bin/containerd", sha256=lab_binary_sha256(URL))
    first, second = await _run(backend, step, step.model_copy(update={"id": "again"}))
    assert (first.status, second.status) == ("Succeeded", "Skipped")
    f = root / "usr/local/bin/containerd"
    assert f.read_bytes() == lab_binary_bytes(URL) and (f.stat().st_mode & 0o777) == 0o755
    [bad] = await _run(backend, step.model_copy(update={"sha256": lab_binary_sha256(URL + "x"), "retries": 2}))
    assert bad.status == "Failed" and bad.attempts == 1 and "lab placeholder" in bad.stderr


async def test_units_are_state_files_and_need_their_binary(lab: tuple[LabBackend, Path]) -> None:
    backend, root = lab
    layout = LabLayout(root)
    [no_unit] = await _run(backend, SystemdUnit(id="k", unit="kubelet.service", action="enable-now"))
    assert no_unit.status == "Failed" and "Unit kubelet.service not found" in no_unit.stderr
    unit_dir = root / "etc/systemd/system"
    unit_dir.mkdir(parents=True)
    (unit_dir / "kubelet.service").write_text("[Service]\nExecStart=/usr/bin/kubelet \\\n    --config=/var/lib/kubelet/config.yaml\n")
    [no_binary] = await _run(backend, SystemdUnit(id="k", unit="kubelet.service", action="enable-now"))
    assert no_binary.status == "Failed" and "ExecStart program /usr/bin/kubelet is not an executable file" in no_binary.stderr
    assert layout.unit_state("kubelet.service")["active"] is False

    steps = await _run(backend, SystemdUnit(id="r", unit="", action="daemon-reload"),
                       SystemdUnit(id="c", unit="containerd.service", action="enable-now"),
                       SystemdUnit(id="d", unit="containerd", action="disable"))
    assert [s.status for s in steps] == ["Succeeded"] * 3
    assert "no unit file for containerd.service" in steps[1].stdout
    state = json.loads(layout.unit_file("containerd.service").read_text())
    assert state == {"unit": "containerd.service", "enabled": False, "active": True}


async def test_programs_run_from_the_tree_or_are_simulated(lab: tuple[LabBackend, Path]) -> None:
    backend, root = lab
    (root / "usr/local/bin").mkdir(parents=True)
    tool = root / "usr/local/bin/tool"
    tool.write_text('#!/bin/sh\necho "ran in $PWD with $1 on $BKE_LAB_IP"\n')
    tool.chmod(0o755)
    absolute, bare, simulated = await _run(
        backend, RunProgram(id="a", argv=["/usr/local/bin/tool", "x"]),
        RunProgram(id="b", argv=["tool", "y"]), RunProgram(id="c", argv=["sysctl", "-w", "net.ipv4.ip_forward=1"]))
    assert absolute.stdout == f"ran in {root.resolve()} with x on 127.0.0.1\n"
    assert bare.stdout.startswith("ran in") and "with y" in bare.stdout
    assert simulated.status == "Succeeded" and "simulated sysctl -w net.ipv4.ip_forward=1" in simulated.stdout
    logged = [json.loads(line) for line in LabLayout(root).programs_log.read_text().splitlines()]
    assert logged == [{"stepId": "c", "argv": ["sysctl", "-w", "net.ipv4.ip_forward=1"]}]


async def test_fail_step_control_file(lab: tuple[LabBackend, Path]) -> None:
    backend, root = lab
    layout = LabLayout(root)
    layout.ensure()
    step = CheckHost(id="write:/etc/kubernetes/admin.conf", checks=["time"])
    control = layout.fail_step_file(step.id)
    control.write_text("disk on fire\n")
    [failed] = await _run(backend, step)
    assert failed.status == "Failed" and failed.stderr == "disk on fire" and failed.exit_code == 1
    control.unlink()
    [ok] = await _run(backend, step)
    assert ok.status == "Succeeded"


async def test_lab_checks_probe_the_node_address(lab: tuple[LabBackend, Path]) -> None:
    backend, _ = lab
    [res] = await _run(backend, CheckHost(id="pre", checks=["os", "swap-off", "kernel-modules", "disk", "time"]))
    assert res.status == "Succeeded" and "lab node" in res.stdout
