"""The ResetNode step on the lab backend (a tmp node root, the real kubelet stand-in): pods stop
before anything is removed, exactly the reset table goes, a re-run finishes the job, binaries
only on delete; and the host backend's reset allow-list is exactly the reset table plus etcd's
data dirs."""
from __future__ import annotations

import asyncio
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from bke.contracts.agent import AgentCommand, StepResult
from bke.contracts.agent_steps import LeaveEtcdMember, ResetNode, Step, SystemdUnit
from bke_agent import AgentIdentity, Executor, LabBackend, LabLayout
from bke_agent.backends.host import HostBackend
from bke_agent.backends.paths import HOST_WRITE_DIRS
from bke_agent.reset import RESET_DIRS, RESET_TABLE, pods_of

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
POD = b"""apiVersion: v1
kind: Pod
metadata: {name: kube-scheduler, namespace: kube-system}
spec:
  containers:
  - name: kube-scheduler
    image: registry.k8s.io/kube-scheduler:v1.33.2
    command: [kube-scheduler, --bind-address=127.0.0.1]
"""
WRITTEN = ("etc/kubernetes/pki/ca.crt", "etc/kubernetes/admin.conf", "var/lib/kubelet/config.yaml",
           "etc/containerd/config.toml", "etc/crictl.yaml", "etc/sysctl.d/99-bke.conf", "var/lib/etcd/member/snap/db",
           "usr/bin/kubelet", "usr/local/bin/containerd", "opt/cni/bin/bridge")
KEPT = ("etc/hostname", "var/lib/other/data", "etc/sysctl.d/10-distro.conf")


def _put(root: Path, rel: str, data: bytes = b"x", mode: int = 0o644) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
    p.chmod(mode)


@pytest.fixture
def node(tmp_path: Path) -> tuple[LabBackend, Path]:
    root = tmp_path / "hosts/n1"
    for rel in (*WRITTEN, *KEPT):
        _put(root, rel)
    _put(root, "usr/bin/kubelet", b"#!/bin/sh\nexit 0\n", 0o755)
    _put(root, "etc/systemd/system/kubelet.service", b"[Service]\nExecStart=/usr/bin/kubelet\n")
    return LabBackend(root, "127.0.0.1", kubelet_poll_s=0.05), root


async def _run(backend: LabBackend, *steps: Step) -> list[StepResult]:
    cmd = AgentCommand(command_id="c/reset/n/0", cluster="c", node="n", phase="reset", issued_at="t", steps=list(steps))
    return (await Executor(backend, AgentIdentity.ephemeral(), now=lambda: NOW).run(cmd)).steps


async def _until(cond, what: str, timeout_s: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)  # polling under a deadline


def _left(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and "bke-lab" not in p.parts}


async def test_reset_stops_the_pods_then_removes_the_reset_table(node: tuple[LabBackend, Path]) -> None:
    backend, root = node
    [started] = await _run(backend, SystemdUnit(id="k", unit="kubelet.service", action="enable-now"))
    assert started.status == "Succeeded"
    _put(root, "etc/kubernetes/manifests/kube-scheduler.yaml", POD)
    layout = LabLayout(root)
    await _until(lambda: (layout.pod_status("kube-scheduler") or {}).get("phase") == "Running", "the pod to run")
    try:
        [res] = await _run(backend, ResetNode(id="reset", etcd_data_dirs=["/var/lib/etcd"]))
        assert res.status == "Succeeded", res.stderr
        assert (layout.pod_status("kube-scheduler") or {}).get("phase") == "Stopped"
        assert not backend.kubelet.running and layout.unit_state("kubelet.service")["active"] is False
        # configuration and etcd data gone; binaries kept (a reset), and nothing BKE did not write touched
        assert _left(root) == {*KEPT, "usr/bin/kubelet", "usr/local/bin/containerd", "opt/cni/bin/bridge"}
        assert "removed manifest /etc/kubernetes/manifests/kube-scheduler.yaml" in res.stdout
        # a re-run (after a crash, a redelivery) finds everything gone and succeeds
        [again] = await _run(backend, ResetNode(id="reset", etcd_data_dirs=["/var/lib/etcd"]))
        assert again.status == "Succeeded" and "already absent: /etc/kubernetes" in again.stdout
    finally:
        await backend.stop()


async def test_delete_also_removes_binaries_and_stops_containerd(node: tuple[LabBackend, Path]) -> None:
    backend, root = node
    [res] = await _run(backend, ResetNode(id="reset", etcd_data_dirs=["/var/lib/etcd"], binaries=True))
    assert res.status == "Succeeded", res.stderr
    assert _left(root) == set(KEPT)
    assert LabLayout(root).unit_state("containerd.service")["active"] is False


async def test_a_data_dir_out_of_the_tree_is_refused_before_anything_goes(node: tuple[LabBackend, Path]) -> None:
    backend, root = node
    [res] = await _run(backend, ResetNode(id="reset", etcd_data_dirs=["/var/lib/bke-lab"]))
    assert res.status == "Failed" and "belongs to the agent itself" in res.stderr
    assert (root / "etc/kubernetes/admin.conf").exists()  # nothing removed


async def test_host_reset_allows_only_the_table_and_etcd_data(tmp_path: Path) -> None:
    host = HostBackend(tmp_path)
    assert host.reset_local("/var/lib/etcd-events") == tmp_path / "var/lib/etcd-events"
    for refused in ("/var/lib/postgres", "/etc/passwd", "/home"):
        with pytest.raises(Exception, match="outside the directories"):
            host.reset_local(refused)
    [res] = await _run(host, ResetNode(id="reset", etcd_data_dirs=["/srv/etcd"]))  # type: ignore[arg-type]
    assert res.status == "Failed" and "/srv/etcd" in res.stderr


async def test_a_member_that_leaves_its_cluster_stops_then_its_data_goes_and_nothing_else(node: tuple[LabBackend, Path]) -> None:
    """LeaveEtcdMember: the member's pod stops (its manifest taken away) before its data goes;
    the kubelet, the other static pods and the other etcd member's data stay; a re-run skips."""
    backend, root = node
    [started] = await _run(backend, SystemdUnit(id="k", unit="kubelet.service", action="enable-now"))
    assert started.status == "Succeeded"
    member = POD.replace(b"kube-scheduler", b"etcd-events")
    _put(root, "etc/kubernetes/manifests/etcd-events.yaml", member)
    _put(root, "etc/kubernetes/manifests/kube-scheduler.yaml", POD)
    _put(root, "var/lib/etcd-events/member/snap/db")
    layout = LabLayout(root)
    for pod in ("etcd-events", "kube-scheduler"):
        await _until(lambda pod=pod: (layout.pod_status(pod) or {}).get("phase") == "Running", f"{pod} to run")
    leave = LeaveEtcdMember(id="leave", manifest="/etc/kubernetes/manifests/etcd-events.yaml",
                            data_dir="/var/lib/etcd-events")
    try:
        [res] = await _run(backend, leave)
        assert res.status == "Succeeded", res.stderr
        assert (layout.pod_status("etcd-events") or {}).get("phase") == "Stopped"
        assert (layout.pod_status("kube-scheduler") or {}).get("phase") == "Running" and backend.kubelet.running
        assert not (root / "var/lib/etcd-events").exists() and not (root / "etc/kubernetes/manifests/etcd-events.yaml").exists()
        assert (root / "var/lib/etcd/member/snap/db").exists()  # etcd-data's member is another
        assert "removed the member's data: /var/lib/etcd-events" in res.stdout
        [again] = await _run(backend, leave)  # a redelivery after a crash: nothing left to do
        assert again.status == "Skipped", again.stderr
        # the host's allow-list decides which directory may go, as for a reset
        [refused] = await _run(backend, leave.model_copy(update={"data_dir": "/var/lib/bke-lab"}))
        assert refused.status == "Failed" and "belongs to the agent itself" in refused.stderr
    finally:
        await backend.stop()


@pytest.mark.parametrize("stems, present, pods, left", [
    # leaving etcd-data (etcd.yaml) on a node that keeps its etcd-events member: that pod is not etcd's
    (["etcd"], ["etcd-events", "kube-apiserver"], ["etcd-events-n1", "kube-apiserver-n1"], []),
    (["etcd"], ["etcd-events"], ["etcd-n1", "etcd-events-n1"], ["etcd"]),
    # a reset waits for every manifest it took away
    (["etcd", "etcd-events"], [], ["etcd-events-n1"], ["etcd-events"]),
    (["kube-scheduler"], [], [], []),
])
def test_a_pod_belongs_to_the_longest_manifest_name_it_starts_with(stems, present, pods, left) -> None:
    assert pods_of(stems, present, pods) == left


def test_the_reset_table_covers_everything_the_host_may_write() -> None:
    # every file family BKE writes on a host is removed by a delete (no drift between the tables)
    assert set(RESET_DIRS) == set(HOST_WRITE_DIRS)
    assert all(kind in ("config", "binary") and why for _, kind, why in RESET_TABLE)
