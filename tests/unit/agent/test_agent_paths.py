"""No write escapes where a backend may write: the lab node's root (including through `..`
and symlinks), the host allow-list applied relative to a temporary root."""
from __future__ import annotations

import base64
import hashlib
import os
from datetime import datetime, timezone
from pathlib import Path

import pytest

from bke.contracts.agent import AgentCommand
from bke.contracts.agent_steps import FetchFile, RemoveFile, Step, WriteFile
from bke_agent import AgentIdentity, Executor, LabBackend, PathRefused
from bke_agent.backends import HOST_WRITE_DIRS, PathPolicy

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _write(path: str, data: bytes = b"x", mode: int = 0o644) -> WriteFile:
    return WriteFile(id=f"w:{path}", path=path, mode=mode, content_b64=base64.b64encode(data).decode(),
                     sha256=hashlib.sha256(data).hexdigest())


async def _run(backend: LabBackend, *steps: Step) -> list[tuple[str, str]]:
    cmd = AgentCommand(command_id="c/p/n/0", cluster="c", node="n", phase="p", issued_at="t", steps=list(steps))
    result = await Executor(backend, AgentIdentity.ephemeral(), now=lambda: NOW).run(cmd)
    return [(s.status, s.stderr) for s in result.steps]


@pytest.fixture
def node(tmp_path: Path) -> tuple[LabBackend, Path, Path]:
    root = tmp_path / "hosts" / "n1"
    root.mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    return LabBackend(root, "127.0.0.1", state_dir=root / "var/lib/bke-agent"), root, outside


@pytest.mark.parametrize("path", [
    "/etc/../../../outside/evil",
    "/../outside/evil",
    "/etc/kubernetes/../../../../outside/evil",
    "relative/path",
    "/",
])
async def test_lab_refuses_dotdot_and_relative(node: tuple[LabBackend, Path, Path], path: str) -> None:
    backend, root, outside = node
    [(status, stderr)] = await _run(backend, _write(path))
    assert status == "Failed" and ("'..'" in stderr or "absolute" in stderr or "not a file" in stderr)
    assert list(outside.iterdir()) == []


async def test_lab_refuses_symlinked_directory_out_of_the_root(node: tuple[LabBackend, Path, Path]) -> None:
    backend, root, outside = node
    (root / "etc").mkdir()
    (root / "etc/kubernetes").symlink_to(outside)
    [(status, stderr)] = await _run(backend, _write("/etc/kubernetes/admin.conf"))
    assert status == "Failed" and "symlink" in stderr
    [(status, _)] = await _run(backend, _write("/etc/kubernetes/pki/deep/ca.crt"))
    assert status == "Failed"
    assert list(outside.iterdir()) == []


async def test_lab_replaces_a_symlinked_file_instead_of_following_it(node: tuple[LabBackend, Path, Path]) -> None:
    backend, root, outside = node
    target = outside / "victim"
    target.write_bytes(b"untouched")
    (root / "etc").mkdir()
    (root / "etc/link").symlink_to(target)
    [(status, _)] = await _run(backend, _write("/etc/link", b"new"))
    assert status == "Succeeded"
    assert target.read_bytes() == b"untouched"
    assert not (root / "etc/link").is_symlink() and (root / "etc/link").read_bytes() == b"new"
    [(status, _)] = await _run(backend, _write("/etc/link2", b"z"))
    (root / "etc/link3").symlink_to(target)
    [(status, _)] = await _run(backend, RemoveFile(id="rm", path="/etc/link3"))
    assert status == "Succeeded" and target.read_bytes() == b"untouched"


async def test_lab_refuses_agent_state_and_control_files(node: tuple[LabBackend, Path, Path]) -> None:
    backend, root, _ = node
    [(s1, e1)] = await _run(backend, _write("/var/lib/bke-agent/agent.key"))
    [(s2, e2)] = await _run(backend, _write("/var/lib/bke-lab/unhealthy/etcd"))
    assert (s1, s2) == ("Failed", "Failed") and "belongs to the agent" in e1 + e2
    (root / "etc").mkdir()
    (root / "etc/sneaky").symlink_to(root / "var/lib/bke-agent", target_is_directory=True)
    (root / "var/lib/bke-agent").mkdir(parents=True, exist_ok=True)
    [(s3, e3)] = await _run(backend, _write("/etc/sneaky/agent.key"))
    assert s3 == "Failed" and "belongs to the agent" in e3


async def test_lab_writes_inside_the_root_with_mode(node: tuple[LabBackend, Path, Path]) -> None:
    backend, root, _ = node
    [(status, _)] = await _run(backend, _write("/etc/kubernetes/pki/etcd/server.key", b"k", 0o600))
    f = root / "etc/kubernetes/pki/etcd/server.key"
    assert status == "Succeeded" and f.read_bytes() == b"k" and (f.stat().st_mode & 0o777) == 0o600
    fetch = FetchFile(id="f", url="http://repo/x/../y", path="/usr/local/bin/../../../../escape", sha256="0" * 64)
    [(status, stderr)] = await _run(backend, fetch)
    assert status == "Failed" and "'..'" in stderr


def test_host_policy_allow_list_relative_to_root(tmp_path: Path) -> None:
    policy = PathPolicy(tmp_path, HOST_WRITE_DIRS)
    assert policy.local("/etc/kubernetes/pki/ca.crt") == tmp_path.resolve() / "etc/kubernetes/pki/ca.crt"
    # our units and binaries only: not any unit, not any binary
    for bad in ("/etc/shadow", "/etc/kubernetes2/x", "/root/.ssh/authorized_keys", "/usr/local/lib/x",
                "/etc/systemd/system/evil.service", "/etc/systemd/system/multi-user.target.wants/evil.service",
                "/usr/local/bin/evil", "/usr/bin/kube-evil", "/usr/local/bin/containerd-evil/x",
                "/var/lib/etcd/member/snap/db", "/var/lib/bke-agent/agent.key", "/etc/bke-agent/env"):
        with pytest.raises(PathRefused, match="outside the directories"):
            policy.local(bad)
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/ssh").mkdir()
    (tmp_path / "etc/kubernetes").symlink_to(tmp_path / "etc/ssh")  # inside the root, but out of the allowed dir
    (tmp_path / "etc/containerd").mkdir()
    (tmp_path / "etc/containerd/certs.d").symlink_to(tmp_path / "etc/ssh")
    with pytest.raises(PathRefused, match="symlink"):
        policy.local("/etc/containerd/certs.d/sshd_config")
    os.unlink(tmp_path / "etc/kubernetes")


def test_host_allow_list_covers_every_rendered_location(tmp_path: Path) -> None:
    """Everything the renderer and certs put on a node lands inside the host allow-list."""
    from bke.core import paths
    from bke.core.render import layout

    policy = PathPolicy(tmp_path, HOST_WRITE_DIRS)
    files = [layout.KUBELET_UNIT, layout.CONTAINERD_UNIT, layout.CONTAINERD_BIN, layout.KUBELET_BIN,
             "/usr/bin/kubectl", layout.CONTAINERD_CONFIG, f"{layout.CONTAINERD_CERTS_D}/registry.example/hosts.toml",
             layout.HAPROXY_CFG, layout.KEEPALIVED_CONF, layout.KEEPALIVED_CHECK, *layout.PKI.values(),
             paths.ADMIN_CONF, paths.SUPER_ADMIN_CONF, paths.CONTROLLER_MANAGER_CONF, paths.SCHEDULER_CONF,
             paths.KUBELET_CONF, paths.KUBELET_CONFIG, f"{paths.MANIFESTS_DIR}/etcd.yaml",
             *(f"{d}/server.key" for d in paths.ETCD_CERT_DIRS.values())]
    for f in files:
        assert policy.local(f).is_relative_to(tmp_path.resolve()), f
    with pytest.raises(PathRefused):
        policy.local("/usr/bin/sudo")
