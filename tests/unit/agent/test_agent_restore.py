"""The etcd restore's agent steps on a node tree in a temp dir, through the real executor: a
manifest parked and brought back (idempotent, the port waited for), a member restored with the
step's values and its old data kept aside, a restore cut short run again, an etcdutl failure
reported, and the received clear snapshot never left behind. etcdutl and the snapshot's
delivery are stand-ins (a script recording its argv; a receiver writing a file)."""
from __future__ import annotations

import asyncio
import socket
from datetime import datetime, timezone
from pathlib import Path

import pytest

from bke.contracts.agent import AgentCommand
from bke.contracts.agent_steps import PARKED_DIR, ParkStaticPod, RestoreEtcdMember
from bke_agent import AgentIdentity, Executor, HostBackend, LabBackend

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
MANIFEST = "/etc/kubernetes/manifests/etcd.yaml"
SHA = "cd" * 32
FAKE_ETCDUTL = """#!/bin/sh
printf '%s\\n' "$@" > "$(dirname "$0")/argv.txt"
for a; do last=$a; done
mkdir -p "$last/member"
"""
FAILING_ETCDUTL = """#!/bin/sh
echo "snapshot file has wrong hash" >&2
exit 3
"""


async def _run(backend, step) -> object:  # type: ignore[no-untyped-def]
    cmd = AgentCommand(command_id="c/restore@r1@x/n1/0", cluster="c", node="n1", phase="p",
                       issued_at=NOW.isoformat(), steps=[step])
    return (await Executor(backend, AgentIdentity.ephemeral(), now=lambda: NOW).run(cmd)).steps[0]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_park_moves_the_manifest_aside_and_back_and_is_idempotent(tmp_path: Path) -> None:
    node = HostBackend(tmp_path)
    (tmp_path / "etc/kubernetes/manifests").mkdir(parents=True)
    (tmp_path / MANIFEST.lstrip("/")).write_text("kind: Pod\n")
    url = f"http://127.0.0.1:{_closed_port()}/health"
    park = ParkStaticPod(id="park:etcd", manifest=MANIFEST, parked=True, port_url=url, timeout_s=10)
    res = await _run(node, park)
    assert res.status == "Succeeded", res.stderr
    assert not (tmp_path / MANIFEST.lstrip("/")).exists()
    assert (tmp_path / PARKED_DIR.lstrip("/") / "etcd.yaml").read_text() == "kind: Pod\n"
    assert (await _run(node, park)).status == "Skipped"  # parked already: a re-run changes nothing
    back = ParkStaticPod(id="unpark:etcd", manifest=MANIFEST, parked=False)
    assert (await _run(node, back)).status == "Succeeded"
    assert (tmp_path / MANIFEST.lstrip("/")).read_text() == "kind: Pod\n"
    (tmp_path / MANIFEST.lstrip("/")).unlink()
    gone = await _run(node, back)
    assert gone.status == "Failed" and "neither it nor its parked copy exists" in gone.stderr


async def test_park_fails_while_the_pod_still_listens(tmp_path: Path) -> None:
    node = HostBackend(tmp_path)
    (tmp_path / "etc/kubernetes/manifests").mkdir(parents=True)
    (tmp_path / MANIFEST.lstrip("/")).write_text("kind: Pod\n")
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    try:
        port = server.sockets[0].getsockname()[1]
        park = ParkStaticPod(id="park:etcd", manifest=MANIFEST, parked=True, port_url=f"http://127.0.0.1:{port}/health",
                             timeout_s=6)
        res = await _run(node, park)
    finally:
        server.close()
        await server.wait_closed()
    assert res.status == "Failed" and f"127.0.0.1:{port} still accepts connections" in res.stderr


class _Receiver:
    """Stands in for the delivery (bke.adapters.etcdsnap.delivery; tested in test_etcd_restore.py)."""

    def __init__(self, scratch: Path) -> None:
        self.scratch = scratch
        self.received: list[Path] = []

    async def receive(self, step: RestoreEtcdMember) -> tuple[Path, int]:
        self.scratch.mkdir(parents=True, exist_ok=True)
        clear = self.scratch / "snapshot.db"
        clear.write_bytes(b"snapshot")
        self.received.append(clear)
        return clear, 1


class _Node(LabBackend):
    def __init__(self, root: Path, etcdutl: Path) -> None:
        super().__init__(root, "127.0.0.1", restores=_Receiver(root / "var/lib/bke-agent/restore"))  # type: ignore[arg-type]
        self.fake_etcdutl = etcdutl

    def etcdutl_path(self) -> str:
        return str(self.fake_etcdutl)


def _script(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "bin" / "etcdutl"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def _step() -> RestoreEtcdMember:
    return RestoreEtcdMember(id="restore:etcd-data", restore_id="r1", etcd_cluster="etcd-data", member="m1",
                             initial_cluster="m1=https://10.0.0.1:2380,m2=https://10.0.0.2:2380", token="c-etcd-data-s1",
                             peer_url="https://10.0.0.1:2380", data_dir="/var/lib/etcd",
                             aside_dir="/var/lib/etcd.before-restore-s1", sha256=SHA, size=8)


async def test_a_member_is_restored_with_its_values_and_its_old_data_kept(tmp_path: Path) -> None:
    root = tmp_path / "node"
    (root / "var/lib/etcd/member").mkdir(parents=True)
    (root / "var/lib/etcd/member/old").write_text("before")
    etcdutl = _script(tmp_path, FAKE_ETCDUTL)
    node = _Node(root, etcdutl)
    res = await _run(node, _step())
    assert res.status == "Succeeded", res.stderr
    assert (root / "var/lib/etcd.before-restore-s1/member/old").read_text() == "before"  # kept aside
    assert (root / "var/lib/etcd/member").is_dir() and not (root / "var/lib/etcd/member/old").exists()
    argv = (tmp_path / "bin/argv.txt").read_text().splitlines()
    clear = node.restores.received[0]  # type: ignore[union-attr]
    assert argv == ["snapshot", "restore", str(clear), "--name", "m1",
                    "--initial-cluster", "m1=https://10.0.0.1:2380,m2=https://10.0.0.2:2380",
                    "--initial-cluster-token", "c-etcd-data-s1", "--initial-advertise-peer-urls",
                    "https://10.0.0.1:2380", "--data-dir", str(root / "var/lib/etcd")]
    assert not clear.exists()  # the clear snapshot is gone
    # run again (a restore asked for again): the aside dir keeps the data from before any restore
    (root / "var/lib/etcd/member/partial").write_text("restored once")
    assert (await _run(node, _step())).status == "Succeeded"
    assert (root / "var/lib/etcd.before-restore-s1/member/old").read_text() == "before"
    assert not (root / "var/lib/etcd/member/partial").exists()


async def test_an_etcdutl_failure_fails_the_step_with_its_stderr_and_leaves_no_clear_file(tmp_path: Path) -> None:
    root = tmp_path / "node"
    node = _Node(root, _script(tmp_path, FAILING_ETCDUTL))
    res = await _run(node, _step())
    assert res.status == "Failed" and res.exit_code == 3
    assert "snapshot file has wrong hash" in res.stderr and "etcdutl snapshot restore exited 3" in res.stderr
    assert not node.restores.received[0].exists()  # type: ignore[union-attr]


async def test_a_node_without_a_bus_cannot_restore(tmp_path: Path) -> None:
    res = await _run(HostBackend(tmp_path), _step())
    assert res.status == "Failed" and "cannot receive a snapshot" in res.stderr


def test_restore_values_are_checked_before_anything_runs() -> None:
    with pytest.raises(ValueError, match="data_dir|dataDir"):
        RestoreEtcdMember(**{**_step().model_dump(), "data_dir": "/etc/kubernetes"})
    with pytest.raises(ValueError, match="member"):
        RestoreEtcdMember(**{**_step().model_dump(), "member": "--data-dir=/x"})
