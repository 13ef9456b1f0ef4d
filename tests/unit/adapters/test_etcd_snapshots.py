"""etcd snapshots' pure parts: the sealed stream, etcd's stream and hash, records, the snapshot
key at rest, the snapshot step from a plan, and the agent's bus permissions for the store (the
restore: test_etcd_restore.py)."""
from __future__ import annotations

import base64
import hashlib
import io
import json
import struct
from datetime import datetime, timezone
from pathlib import Path

import pytest

from bke.adapters.auth.permissions import agent_permissions
from bke.contracts.agent import AgentCommand
from bke.contracts.agent_steps import ETCD_SNAPSHOT_BUCKET, EtcdSnapshot
from bke.adapters.etcdsnap.etcd_stream import EtcdSnapshotError, check_etcd_hash, decode_line
from bke.core.etcdsnap.records import (
    SnapshotRecord, object_name, record_bytes, record_from_headers, record_headers, snapshot_id,
)
from bke.core.etcdsnap.sealed_stream import MAGIC, SealedStreamError, open_stream, seal_stream
from bke.core.etcdsnap.step import snapshot_step, snapshot_targets
from bke.adapters.etcdsnap.store import SnapshotNotAuthentic, check_author
from bke.adapters.etcdsnap.upload import meta_subject
from bke.core.secrets.at_rest import DecryptError, SecretBox
from bke.core.secrets.sealing import NotForThisKey, SealedDataError, agent_key_id, generate_agent_key
from bke.core.secrets.snapshot_key import (
    SnapshotKey, SnapshotKeyError, ensure_snapshot_key_sync, recipient_from_b64, record_mac, split_stored,
    stored_public_b64, upgrade_stored_form,
)

from ..upgrade_helpers import SEED, SPLIT, plan_of

NOW = datetime(2026, 12, 1, 9, 30, 5, tzinfo=timezone.utc)
KEY = SnapshotKey.generate()


def _sealed(data: bytes, piece: int = 1000) -> bytes:
    return b"".join(seal_stream(io.BytesIO(data).read, KEY.public, piece))


def _open(blob: bytes, key: SnapshotKey = KEY) -> bytes:
    return b"".join(open_stream(io.BytesIO(blob).read, key.open))


def _frames(blob: bytes) -> list[bytes]:
    out, at = [], len(MAGIC)
    while at < len(blob):
        (n,) = struct.unpack_from(">I", blob, at)
        out.append(blob[at:at + 4 + n])
        at += 4 + n
    return out


# --- the sealed stream -----------------------------------------------------------------------
@pytest.mark.parametrize("size", [0, 1, 999, 1000, 1001, 3500])
def test_sealed_stream_round_trip(size: int) -> None:
    data = bytes(range(256)) * (size // 256 + 1)
    data = data[:size]
    blob = _sealed(data)
    assert blob.startswith(MAGIC) and len(_frames(blob)) == max(1, -(-size // 1000))
    assert _open(blob) == data
    if size > 16:
        assert data[:16] not in blob  # nothing in clear


def test_sealed_stream_refuses_reorder_drop_truncation_and_extra_bytes() -> None:
    data = b"x" * 3500
    blob = _sealed(data)
    f = _frames(blob)
    cases = {
        "piece 1 found where piece 0": MAGIC + f[1] + f[0] + f[2] + f[3],
        "piece 2 found where piece 1": MAGIC + f[0] + f[2] + f[3],
        "without its last piece": MAGIC + f[0] + f[1],
        "cut short": blob[:-5],
        "bytes follow the last piece": blob + b"!",
        "bad magic": b"BKESNAP0" + blob[len(MAGIC):],
    }
    for why, bad in cases.items():
        with pytest.raises(SealedStreamError, match=why):
            _open(bad)
    altered = bytearray(blob)
    altered[-3] ^= 1
    with pytest.raises(SealedDataError, match="altered"):
        _open(bytes(altered))
    with pytest.raises(NotForThisKey):
        _open(blob, SnapshotKey.generate())


# --- etcd's stream and hash ----------------------------------------------------------------------
def test_gateway_lines_and_errors() -> None:
    assert decode_line(json.dumps({"result": {"blob": base64.b64encode(b"abc").decode()}}).encode()) == b"abc"
    assert decode_line(b'{"result":{"remainingBytes":"0"}}') == b""
    with pytest.raises(EtcdSnapshotError, match="etcd refused the snapshot: permission denied"):
        decode_line(b'{"error":{"grpc_code":7,"message":"permission denied"}}')
    for bad in (b"nope", b"[1]", b'{"other":1}'):
        with pytest.raises(EtcdSnapshotError):
            decode_line(bad)


def test_etcd_hash_rule(tmp_path: Path) -> None:
    db = bytes(range(256)) * 8  # 2048 bytes: whole 512-byte pages, like a bolt file
    good = tmp_path / "good.db"
    good.write_bytes(db + hashlib.sha256(db).digest())
    assert check_etcd_hash(good) == hashlib.sha256(good.read_bytes()).hexdigest()
    for name, data, why in [("nohash", db, "not a database followed by etcd's sha256"),
                            ("bad", db + hashlib.sha256(b"other").digest(), "does not match"),
                            ("flipped", b"\1" + db[1:] + hashlib.sha256(db).digest(), "does not match")]:
        (tmp_path / name).write_bytes(data)
        with pytest.raises(EtcdSnapshotError, match=why):
            check_etcd_hash(tmp_path / name)


# --- records ---------------------------------------------------------------------------------------
def _record(**over: object) -> SnapshotRecord:
    fields: dict[str, object] = dict(
        snapshot_id="20261201t093005z-etcd1", cluster="big", etcd_cluster="etcd-data", member="etcd1", node="etcd1",
        revision=42, size=2080, sha256="a" * 64, sealed_to=KEY.key_id, taken_at=NOW.isoformat(),
        object_name="big/etcd-data/20261201t093005z-etcd1")
    fields.update(over)
    return SnapshotRecord.model_validate(fields)


def test_ids_names_and_headers() -> None:
    assert snapshot_id(NOW, "Etcd_1.example") == "20261201t093005z-etcd-1.example"
    assert object_name("big", "etcd-data", "x") == "big/etcd-data/x"
    rec = _record()
    headers = record_headers(rec)
    assert list(headers) == ["Bke-Snapshot-V1"] and isinstance(headers["Bke-Snapshot-V1"], list)
    assert record_from_headers(json.loads(json.dumps(headers))) == rec
    assert record_from_headers(None) is None and record_from_headers({"Other": ["x"]}) is None
    assert meta_subject(ETCD_SNAPSHOT_BUCKET, rec.object_name) == (
        f"$O.{ETCD_SNAPSHOT_BUCKET}.M.{base64.urlsafe_b64encode(rec.object_name.encode()).decode()}")


# --- the snapshot key ----------------------------------------------------------------------------
class _Store(dict[str, bytes]):
    def set(self, name: str, value: bytes, *, nx: bool = False) -> bool:
        if nx and name in self:
            return False
        self[name] = value
        return True


def test_record_mac_names_its_writer_and_covers_every_field() -> None:
    agent, other = generate_agent_key(), generate_agent_key()
    rec = _record(agent_id=agent_key_id(agent.public_key()))
    rec = rec.model_copy(update={"mac": record_mac(agent, KEY.public, record_bytes(rec))})
    check_author(rec, KEY, agent.public_key())
    check_author(rec.model_copy(update={"stored_size": 99}), KEY, agent.public_key())  # filled in by listing
    forged = _record(agent_id=agent_key_id(agent.public_key()))  # another key's MAC, claiming `agent`
    forged = forged.model_copy(update={"mac": record_mac(other, KEY.public, record_bytes(forged))})
    for bad in (rec.model_copy(update={"sha256": "b" * 64}), rec.model_copy(update={"cluster": "other"}), forged,
                rec.model_copy(update={"mac": ""})):
        with pytest.raises(SnapshotNotAuthentic, match="not written by the agent BKE provisioned for etcd1"):
            check_author(bad, KEY, agent.public_key())
    with pytest.raises(SnapshotNotAuthentic):
        check_author(rec, KEY, other.public_key())
    with pytest.raises(SnapshotNotAuthentic):  # the right writer, but checked with another snapshot key
        check_author(rec, SnapshotKey.generate(), agent.public_key())


def test_snapshot_key_is_made_once_and_kept_encrypted() -> None:
    store, box = _Store(), SecretBox(b"k" * 32)
    key = ensure_snapshot_key_sync(store, "bke:etcd-snapshot-key", box)
    assert ensure_snapshot_key_sync(store, "bke:etcd-snapshot-key", box).key_id == key.key_id
    stored = store["bke:etcd-snapshot-key"]
    assert stored.startswith(b"BKESNAP1") and b"BKEAR1" in stored and key.key_id in repr(key)
    assert key.open(key.seal(b"clear")) == b"clear"
    with pytest.raises(DecryptError):
        ensure_snapshot_key_sync(store, "bke:etcd-snapshot-key", SecretBox(b"j" * 32))
    with pytest.raises(SnapshotKeyError):
        recipient_from_b64("bm90IGEga2V5")
    assert recipient_from_b64(key.public_b64) is not None


def test_the_public_half_is_read_without_the_key_and_checked_by_its_holders() -> None:
    box = SecretBox(b"k" * 32)
    key = SnapshotKey.generate()
    stored = key.seal_for_store(box)
    assert stored_public_b64(stored) == key.public_b64  # the dispatcher's read: no key
    # a record whose public half was swapped does not open for a holder of the key
    swapped = stored[:8] + bytes(32) + stored[40:]
    with pytest.raises(SnapshotKeyError, match="altered"):
        SnapshotKey.from_store(swapped, box)
    # the older form (the at-rest blob alone) still opens, has no public half, and is rewritten
    older = split_stored(stored)[1]
    assert stored_public_b64(older) is None and SnapshotKey.from_store(older, box).key_id == key.key_id
    upgraded = upgrade_stored_form(older, box)
    assert upgraded is not None and stored_public_b64(upgraded) == key.public_b64
    assert upgrade_stored_form(upgraded, box) is None


# --- the step and the restore plan, from plans ----------------------------------------------------
def test_one_snapshot_per_etcd_cluster_on_its_first_member() -> None:
    assert [(t.etcd_cluster, t.node) for t in snapshot_targets(plan_of(SPLIT))] == [
        ("etcd-data", "etcd1"), ("etcd-events", "events1"), ("etcd-pods", "pods1")]
    assert [(t.etcd_cluster, t.node) for t in snapshot_targets(plan_of(SEED))] == [("etcd-data", "master1")]


def test_snapshot_step_from_the_plan() -> None:
    plan = plan_of(SPLIT)
    step = snapshot_step(plan, "etcd-events", "events2", KEY.public_b64, NOW, request_id="r1")
    member = plan.etcd_cluster("etcd-events").member("events2")  # type: ignore[union-attr]
    assert step.endpoint == member.client_url and step.tls is not None  # type: ignore[union-attr]
    assert step.tls.cert == "/etc/kubernetes/pki/etcd-events/healthcheck-client.crt"
    assert step.tls.ca == "/etc/kubernetes/pki/etcd-events/ca.crt"
    assert step.object_name == f"big/etcd-events/{step.snapshot_id}" and step.snapshot_id.endswith("-events2")
    # it travels in a signed command like any step
    cmd = AgentCommand(command_id="c", cluster="big", node="events2", phase="etcd-snapshots", issued_at="t",
                       steps=[step])
    assert isinstance(AgentCommand.model_validate_json(cmd.model_dump_json(by_alias=True)).steps[0], EtcdSnapshot)
    with pytest.raises(KeyError, match="no member"):
        snapshot_step(plan, "etcd-events", "etcd1", KEY.public_b64, NOW)
    with pytest.raises(KeyError, match="no etcd cluster"):
        snapshot_step(plan, "etcd", "etcd1", KEY.public_b64, NOW)


# --- bus permissions --------------------------------------------------------------------------------
def test_agent_may_only_add_objects_to_the_snapshot_store() -> None:
    perms = agent_permissions("c1", "n1")
    store = [s for s in perms.pub_allow if ETCD_SNAPSHOT_BUCKET in s]
    assert store == [f"$O.{ETCD_SNAPSHOT_BUCKET}.C.*", f"$O.{ETCD_SNAPSHOT_BUCKET}.M.*"]
    assert not any(s.startswith("$O.") for s in perms.sub_allow)
    assert "$JS.API.STREAM.MSG.GET.>" in perms.pub_deny
