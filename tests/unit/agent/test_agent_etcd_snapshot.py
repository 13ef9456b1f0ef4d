"""The agent's `EtcdSnapshot` step against a fake etcd gateway (httpx MockTransport) and a fake
bus: what it stores, in which order, and what it reports when etcd or the store fails. The real
processes are in tests/integration/test_etcd_snapshots.py."""
from __future__ import annotations

import base64
import hashlib
import io
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx
import pytest
from nats.js.errors import NoStreamResponseError

from bke.contracts.agent import AgentCommand
from bke.contracts.agent_steps import ETCD_SNAPSHOT_BUCKET, EtcdSnapshot
from bke.core.etcdsnap.records import record_from_headers
from bke.adapters.etcdsnap.store import SnapshotNotAuthentic, check_author
from bke.core.secrets.sealing import public_key_from_raw
from bke.core.etcdsnap.sealed_stream import open_stream
from bke.adapters.etcdsnap.upload import meta_subject
from bke.core.secrets.snapshot_key import SnapshotKey
from bke_agent import AgentIdentity, Executor, LabBackend
from bke_agent.backends import SnapshotTaker

NOW = datetime(2026, 12, 1, 9, 30, tzinfo=timezone.utc)
KEY = SnapshotKey.generate()
DB = bytes(range(256)) * 200  # 51,200 bytes: whole 512-byte pages, like a bolt file


class FakeJs:
    """Records JetStream publishes; `fail` makes them fail as a missing stream does."""

    def __init__(self, fail: bool = False) -> None:
        self.published: list[tuple[str, bytes, dict[str, str] | None]] = []
        self.fail = fail

    async def publish(self, subject: str, payload: bytes = b"", headers: dict[str, str] | None = None) -> None:
        if self.fail:
            raise NoStreamResponseError
        self.published.append((subject, payload, headers))


def _etcd(trailer: bytes, status: int = 200, db_size: int = len(DB)) -> httpx.MockTransport:
    blobs = [DB[i:i + 32768] for i in range(0, len(DB), 32768)] + [trailer]
    stream = b"".join(json.dumps({"result": {"blob": base64.b64encode(b).decode()}}).encode() + b"\n" for b in blobs)

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v3/maintenance/status":
            return httpx.Response(200, json={"header": {"revision": "77"}, "version": "3.5.1", "dbSize": str(db_size)})
        assert request.url.path == "/v3/maintenance/snapshot"
        return httpx.Response(status, content=stream if status == 200 else b'{"error":"no"}')
    return httpx.MockTransport(handler)


def _step() -> EtcdSnapshot:
    return EtcdSnapshot(id="etcd-snapshot/etcd-data", endpoint="https://127.0.0.1:2379", etcd_cluster="etcd-data",
                        member="m1", snapshot_id="20261201t093000z-m1", object_name="c/etcd-data/20261201t093000z-m1",
                        recipient_b64=KEY.public_b64, request_id="r")


AGENT = AgentIdentity.ephemeral()


async def _run(tmp_path: Path, js: FakeJs, transport: httpx.MockTransport | None) -> Any:
    taker = SnapshotTaker(js, tmp_path / "scratch", "c", "m1", AGENT, now=lambda: NOW,  # type: ignore[arg-type]
                          http_transport=transport)
    executor = Executor(LabBackend(tmp_path / "node", "127.0.0.1", snapshots=taker), AGENT, now=lambda: NOW)
    cmd = AgentCommand(command_id="c/1", cluster="c", node="m1", phase="etcd-snapshots", issued_at="t", steps=[_step()])
    return (await executor.run(cmd)).steps[0]


async def test_stores_chunks_then_the_meta_sealed_with_its_record(tmp_path: Path) -> None:
    js = FakeJs()
    res = await _run(tmp_path, js, _etcd(hashlib.sha256(DB).digest()))
    assert res.status == "Succeeded", res.stderr
    *chunks, meta = js.published
    assert chunks and all(s.startswith(f"$O.{ETCD_SNAPSHOT_BUCKET}.C.") for s, _, _ in chunks)
    assert len({s for s, _, _ in chunks}) == 1  # one object: one chunk subject
    assert meta[0] == meta_subject(ETCD_SNAPSHOT_BUCKET, "c/etcd-data/20261201t093000z-m1")
    assert not meta[2]  # no rollup header: the bucket refuses rollups (bke.adapters.bus.streams.APPEND_ONLY_BUCKETS)
    info = json.loads(meta[1])
    sealed = b"".join(p for _, p, _ in chunks)
    assert info["size"] == len(sealed) and info["chunks"] == len(chunks)
    assert info["digest"] == "SHA-256=" + base64.urlsafe_b64encode(hashlib.sha256(sealed).digest()).decode()
    record = record_from_headers(info["headers"])
    assert record is not None and (record.revision, record.etcd_version, record.size) == (77, "3.5.1", len(DB) + 32)
    # written by this agent: the MAC checks with its public key, and with no other
    assert record.agent_id == AGENT.agent_id
    check_author(record, KEY, public_key_from_raw(base64.b64decode(AGENT.public_key_b64)))
    with pytest.raises(SnapshotNotAuthentic):
        other = AgentIdentity.ephemeral()
        check_author(record.model_copy(update={"agent_id": other.agent_id}), KEY,
                     public_key_from_raw(base64.b64decode(other.public_key_b64)))
    clear = b"".join(open_stream(io.BytesIO(sealed).read, KEY.open))
    assert clear == DB + hashlib.sha256(DB).digest() and record.sha256 == hashlib.sha256(clear).hexdigest()
    assert DB[:64] not in sealed
    assert list((tmp_path / "scratch").iterdir()) == []  # the clear file is gone


@pytest.mark.parametrize(("transport", "fail", "why"), [
    (_etcd(hashlib.sha256(b"other").digest()), False, "etcd's own sha256 at the end of the snapshot does not match"),
    (_etcd(b"", status=503), False, "HTTP 503"),
    (_etcd(hashlib.sha256(DB).digest(), db_size=1 << 60), False, "not enough free space in"),
    (_etcd(hashlib.sha256(DB).digest()), True, f"the snapshot store '{ETCD_SNAPSHOT_BUCKET}' does not exist"),
    (httpx.MockTransport(lambda r: (_ for _ in ()).throw(httpx.ConnectError("refused"))), False,
     "https://127.0.0.1:2379/v3/maintenance/status: ConnectError: refused"),
])
async def test_failures_store_nothing_and_say_why(tmp_path: Path, transport: httpx.MockTransport, fail: bool,
                                                  why: str) -> None:
    js = FakeJs(fail=fail)
    res = await _run(tmp_path, js, transport)
    assert res.status == "Failed" and why in res.stderr
    assert js.published == []
    assert list((tmp_path / "scratch").iterdir()) == []


async def test_without_a_store_the_step_fails_at_once(tmp_path: Path) -> None:
    executor = Executor(LabBackend(tmp_path / "node", "127.0.0.1"), AgentIdentity.ephemeral(), now=lambda: NOW)
    step = _step().model_copy(update={"retries": 3})
    cmd = AgentCommand(command_id="c/1", cluster="c", node="m1", phase="p", issued_at="t", steps=[step])
    res = (await executor.run(cmd)).steps[0]
    assert res.status == "Failed" and res.attempts == 1 and "no snapshot store" in res.stderr
