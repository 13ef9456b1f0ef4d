"""etcd snapshots end to end on real processes: a real etcd static pod run by the lab's kubelet
stand-in holds keys; the agent's `EtcdSnapshot` step (lab backend) snapshots it into the real
JetStream object store, sealed; BKE lists it, its stored bytes are not the clear snapshot, BKE
opens it with the deployment's snapshot key (kept in real Redis, encrypted at rest), restores it
with the venv's etcdutl into a fresh data dir, starts an etcd on that dir and reads the keys."""
from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import datetime, timezone
from pathlib import Path

import httpx
import pytest
from nats.js import JetStreamContext
from redis import asyncio as aioredis

from bke.contracts.agent import AgentCommand
from bke.contracts.agent_steps import ETCD_SNAPSHOT_BUCKET, EtcdSnapshot, TlsFiles
from bke.adapters.etcdsnap.local import restore_into
from bke.core.etcdsnap.records import object_name, snapshot_id
from bke.core.etcdsnap.sealed_stream import MAGIC
from bke.adapters.bus.streams import ensure_streams
from bke.adapters.etcdsnap.store import SnapshotNotAuthentic, fetch_snapshot, find_snapshot, list_snapshots
from bke.adapters.runtime import ManagedProcess, etcd_put_get, etcdutl_bin, free_port, start_etcd
from bke.contracts.agent import ProvisionAgent
from bke.core.secrets.at_rest import SECRET_KEY_ENV, SecretBox, create_key_file
from bke.core.secrets.sealing import public_key_from_raw
from bke.core.secrets.snapshot_key import SnapshotKey, ensure_snapshot_key
from bke.adapters.state.keys.certs import provisioned_agents_key
from bke.adapters.state.keys.trust import etcd_snapshot_key
from bke_agent import AgentIdentity, Executor, KubeletStandIn, LabBackend, LabLayout
from bke_agent.backends import SnapshotTaker

from .agent_helpers import PKI, cluster, etcd_manifest, free_node_ip, issue_pki, js, stop_leftover_pods, write_manifest
from .test_agent_kubelet import poll, status_is

pytestmark = pytest.mark.integration
__all__ = ["cluster", "js"]  # fixtures used by name
NOW = datetime(2026, 12, 1, 9, 30, tzinfo=timezone.utc)
KEYS = {f"/registry/secrets/default/s{i}": f"before-upgrade-{i}-{uuid.uuid4().hex}" for i in range(5)}


@pytest.fixture
def node(tmp_path: Path) -> Iterator[tuple[Path, str, list[int]]]:
    root = tmp_path / "hosts" / "m1"
    root.mkdir(parents=True)
    ip, ports = free_node_ip(4)
    try:
        yield root, ip, ports
    finally:
        stop_leftover_pods(root)


@pytest.fixture
async def etcd_member(node: tuple[Path, str, list[int]]) -> AsyncIterator[tuple[Path, str, int]]:
    """A real etcd static pod on the lab node, holding KEYS (written over mTLS)."""
    root, ip, (client, peer, metrics, _) = node
    issue_pki(root, ip)
    write_manifest(root, "etcd.yaml", etcd_manifest(ip, client, peer, metrics))
    kubelet = KubeletStandIn(root, ip, poll_s=0.05)
    await kubelet.start()
    try:
        await poll(status_is(LabLayout(root), "etcd", phase="Running", ready=True), 60, "etcd ready")
        pki = root / PKI.lstrip("/")
        for k, v in KEYS.items():
            await asyncio.to_thread(etcd_put_get, f"https://{ip}:{client}", pki / "ca.crt",
                                    pki / "healthcheck-client.crt", pki / "healthcheck-client.key", k, v)
        yield root, ip, client
    finally:
        await kubelet.stop()


@pytest.fixture
def box(tmp_path: Path) -> tuple[SecretBox, Path]:
    """The `snapshot` at-rest key, in the file BKE_SECRET_KEY_FILE names (the fallback of every kind)."""
    path = tmp_path / "secret.key"
    return create_key_file(path), path


@pytest.fixture
async def snapshot_key(redis_url: str, box: tuple[SecretBox, Path]) -> AsyncIterator[SnapshotKey]:
    """The deployment's key as BKE keeps it: in real Redis under its own name (bytes, as the
    services' clients read it), encrypted at rest with the operator key; removed afterwards."""
    name = etcd_snapshot_key()
    r = aioredis.from_url(redis_url)
    try:
        await r.delete(name)
        first, again = await asyncio.gather(ensure_snapshot_key(r, name, box[0]),
                                            ensure_snapshot_key(r, name, box[0]))
        assert first.key_id == again.key_id  # concurrent makers agree on one key (SET NX)
        stored = await r.get(name)
        # encrypted at rest, the public half in clear before it (what the dispatcher reads)
        assert stored is not None and stored.startswith(b"BKESNAP1") and stored[40:].startswith(b"BKEAR1")
        assert (await ensure_snapshot_key(r, name, box[0])).public_b64 == first.public_b64
        yield first
        await r.delete(name)
    finally:
        await r.aclose()


def _step(client: int, cluster: str, key: SnapshotKey) -> EtcdSnapshot:
    sid = snapshot_id(NOW, "m1")
    return EtcdSnapshot(id="etcd-snapshot/etcd-data", endpoint=f"https://127.0.0.1:{client}",  # loopback: the node's
                        tls=TlsFiles(ca=f"{PKI}/ca.crt", cert=f"{PKI}/healthcheck-client.crt",
                                     key=f"{PKI}/healthcheck-client.key"),
                        etcd_cluster="etcd-data", member="m1", snapshot_id=sid,
                        object_name=object_name(cluster, "etcd-data", sid), recipient_b64=key.public_b64,
                        request_id="req-1", timeout_s=120)


def _start_restored(data_dir: Path, log: Path) -> tuple[ManagedProcess, str]:
    client, peer = free_port(), free_port()
    url = f"http://127.0.0.1:{client}"
    proc = start_etcd(["--name", "restored", "--data-dir", str(data_dir), "--listen-client-urls", url,
                       "--advertise-client-urls", url, "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                       "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                       "--listen-metrics-urls", f"http://127.0.0.1:{free_port()}", "--log-level", "warn"], log)
    return proc, url


async def _value(client: httpx.AsyncClient, url: str, key: str) -> str | None:
    resp = await client.post(f"{url}/v3/kv/range", json={"key": base64.b64encode(key.encode()).decode()})
    kvs = resp.json().get("kvs") or []
    return base64.b64decode(kvs[0]["value"]).decode() if kvs else None


async def test_snapshot_is_stored_sealed_and_restores_into_a_fresh_etcd(
        etcd_member: tuple[Path, str, int], js: JetStreamContext, cluster: str, snapshot_key: SnapshotKey,
        tmp_path: Path) -> None:
    root, ip, client = etcd_member
    await ensure_streams(js)  # the deploy step declares the bucket (the session's runtime did already)
    await ensure_streams(js)  # idempotent
    agent = AgentIdentity.ephemeral()
    taker = SnapshotTaker(js, tmp_path / "agent-state" / "snapshots", cluster, "m1", agent, now=lambda: NOW)
    executor = Executor(LabBackend(root, ip, snapshots=taker), agent, now=lambda: NOW)
    step = _step(client, cluster, snapshot_key)
    cmd = AgentCommand(command_id=f"{cluster}/snap/1", cluster=cluster, node="m1", phase="etcd-snapshots",
                       issued_at=NOW.isoformat(), steps=[step])
    result = await executor.run(cmd)
    assert result.status == "Succeeded", result.model_dump_json(indent=1)
    assert "etcd's hash checked" in result.steps[0].stdout and step.snapshot_id in result.steps[0].stdout
    assert not any((tmp_path / "agent-state" / "snapshots").iterdir())  # the clear file is gone

    # listed, with its record
    records = await list_snapshots(js, cluster)
    assert [r.snapshot_id for r in records] == [step.snapshot_id]
    rec = records[0]
    assert (rec.cluster, rec.etcd_cluster, rec.member, rec.node, rec.request_id) == (cluster, "etcd-data", "m1", "m1",
                                                                                      "req-1")
    assert rec.revision >= len(KEYS) and rec.etcd_version == "3.5.1" and rec.sealed_to == snapshot_key.key_id
    assert rec.size % 512 == 32 and rec.stored_size > rec.size  # etcd's trailing hash; sealing overhead
    assert await list_snapshots(js, cluster, "etcd-events") == []
    assert await list_snapshots(js, f"{cluster}-other") == []

    # stored sealed: the object's bytes are not the snapshot and hold none of the values
    store = await js.object_store(ETCD_SNAPSHOT_BUCKET)
    stored = (await store.get(rec.object_name)).data or b""
    assert stored.startswith(MAGIC) and len(stored) == rec.stored_size
    assert not any(v.encode() in stored for v in KEYS.values())

    author = public_key_from_raw(base64.b64decode(agent.public_key_b64))
    # another snapshot key cannot open it (nor check its record); another agent did not write it
    with pytest.raises(SnapshotNotAuthentic):
        await fetch_snapshot(js, rec, SnapshotKey.generate(), tmp_path / "wrong.db", author=author)
    stranger = public_key_from_raw(base64.b64decode(AgentIdentity.ephemeral().public_key_b64))
    with pytest.raises(SnapshotNotAuthentic, match="not written by the agent BKE provisioned for m1"):
        await fetch_snapshot(js, rec, snapshot_key, tmp_path / "wrong.db", author=stranger)
    assert not (tmp_path / "wrong.db").exists()

    # opened with the deployment's key: the clear snapshot, checked, holds the values
    found = await find_snapshot(js, cluster, "etcd-data", step.snapshot_id)
    clear = await fetch_snapshot(js, found, snapshot_key, tmp_path / "snap.db", author=author)
    assert clear.stat().st_mode & 0o777 == 0o600 and clear.stat().st_size == rec.size
    assert any(v.encode() in clear.read_bytes() for v in KEYS.values())

    # restored into a fresh data dir with etcdutl, then served by a new etcd
    restored = tmp_path / "restored"
    lines = await asyncio.to_thread(restore_into, etcdutl_bin(), clear, restored)
    assert any("restored snapshot" in line for line in lines)
    proc, url = _start_restored(restored, tmp_path / "restored.log")
    try:
        async with httpx.AsyncClient(trust_env=False, timeout=2.0) as http:
            async def healthy() -> bool:
                proc.ensure_running()
                try:
                    return (await http.get(f"{url}/health")).json().get("health") == "true"
                except httpx.HTTPError:
                    return False

            deadline = asyncio.get_running_loop().time() + 30
            while not await healthy():
                assert asyncio.get_running_loop().time() < deadline, "the restored etcd never became healthy"
                await asyncio.sleep(0.1)
            assert {k: await _value(http, url, k) for k in KEYS} == KEYS
    finally:
        proc.stop()


def _bke(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bke_cli.main", *argv], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})}, check=False)


async def test_cli_lists_and_restores_into_a_fresh_dir(
        etcd_member: tuple[Path, str, int], js: JetStreamContext, cluster: str, snapshot_key: SnapshotKey,
        box: tuple[SecretBox, Path], nats_url: str, redis_url: str, tmp_path: Path) -> None:
    root, ip, client = etcd_member
    agent = AgentIdentity.ephemeral()
    taker = SnapshotTaker(js, tmp_path / "scratch", cluster, "m1", agent, now=lambda: NOW)
    step = _step(client, cluster, snapshot_key)
    out = await LabBackend(root, ip, snapshots=taker).execute(step, lambda: b"")
    assert out.status == "Succeeded"

    listed = await asyncio.to_thread(_bke, "etcd", "snapshots", cluster, "--nats", nats_url, "-o", "json")
    assert listed.returncode == 0, listed.stderr
    doc = json.loads(listed.stdout)
    assert [s["snapshotId"] for s in doc["snapshots"]] == [step.snapshot_id]
    table = await asyncio.to_thread(_bke, "etcd", "snapshots", cluster, "--nats", nats_url)
    assert table.returncode == 0 and step.snapshot_id in table.stdout and "etcd-data" in table.stdout

    # a cluster restore (without --into) is the upgrader's, through the agents: its refusals are in
    # tests/integration/test_upgrader_restores.py, the whole restore in tests/e2e/test_lab_real_control_plane.py

    into = tmp_path / "fresh"
    env = {SECRET_KEY_ENV: str(box[1])}
    unknown_agent = await asyncio.to_thread(_bke, "etcd", "restore", cluster, "--etcd-cluster", "etcd-data",
                                            "--snapshot", step.snapshot_id, "--into", str(into), "--nats", nats_url,
                                            "--redis", redis_url, env=env)
    assert unknown_agent.returncode == 2 and "no agent key provisioned for m1" in unknown_agent.stderr
    # the agent key BKE provisioned for m1, as the certs service records it
    r = aioredis.from_url(redis_url)
    try:
        await r.hset(provisioned_agents_key(cluster), "m1", ProvisionAgent(
            cluster=cluster, node="m1", agent_id=agent.agent_id, seal_public_key_b64=agent.public_key_b64,
        ).model_dump_json(by_alias=True))
    finally:
        await r.aclose()
    missing = await asyncio.to_thread(_bke, "etcd", "restore", cluster, "--etcd-cluster", "etcd-data", "--snapshot",
                                      "nope", "--into", str(into), "--nats", nats_url, "--redis", redis_url, env=env)
    assert missing.returncode == 2 and "no snapshot 'nope'" in missing.stderr
    done = await asyncio.to_thread(_bke, "etcd", "restore", cluster, "--etcd-cluster", "etcd-data", "--snapshot",
                                   step.snapshot_id, "--into", str(into), "--nats", nats_url, "--redis", redis_url,
                                   env=env)
    assert done.returncode == 0, done.stderr
    assert f"restored snapshot {step.snapshot_id}" in done.stdout and (into / "member" / "snap" / "db").is_file()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".fresh")] == []  # the clear file is gone
    again = await asyncio.to_thread(_bke, "etcd", "restore", cluster, "--etcd-cluster", "etcd-data", "--snapshot",
                                    step.snapshot_id, "--into", str(into), "--nats", nats_url, "--redis", redis_url,
                                    env=env)
    assert again.returncode == 2 and "not empty" in again.stderr
