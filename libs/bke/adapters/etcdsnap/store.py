"""BKE's side of the snapshot store: make the bucket, list a cluster's snapshots, fetch and open one.

The bucket is a JetStream object store (`ETCD_SNAPSHOT_BUCKET`, file storage); agents add
objects to it (`upload`), services and the operator read it. Opening needs the deployment's
snapshot key (bke.core.secrets.snapshot_key), so only a holder of the operator key can read a
snapshot; the listing needs none (the records are not secret).

`fetch_snapshot` never holds a snapshot in memory: the sealed object is written to a private
file, opened piece by piece into the destination (0600), and the result is checked against the
record's sha256 and etcd's own trailing hash before it is returned.

Errors::

    PermanentError
     ├─ SnapshotNotFound       no such snapshot of this cluster
     ├─ SnapshotNotAuthentic   its record is not from the agent BKE provisioned for its node
     ├─ SnapshotCorrupt        opened bytes do not match the record's sha256
     ├─ EtcdSnapshotError      etcd's own hash does not match (etcd_stream)
     └─ SealedStreamError / SealedDataError   altered or foreign sealed bytes
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError, ObjectNotFoundError
from nats.js.object_store import ObjectStore

from bke.contracts.agent_steps import ETCD_SNAPSHOT_BUCKET
from bke.core.errors import PermanentError
from bke.core.secrets.sealing import agent_key_id
from bke.core.secrets.snapshot_key import SnapshotKey
from .etcd_stream import check_etcd_hash
from bke.core.etcdsnap.records import SnapshotRecord, record_bytes, record_from_headers
from bke.core.etcdsnap.sealed_stream import open_stream

__all__ = ["SnapshotCorrupt", "SnapshotNotAuthentic", "SnapshotNotFound", "check_author", "copy_sealed",
           "fetch_snapshot", "find_snapshot", "list_snapshots"]


class SnapshotNotFound(PermanentError):
    pass


class SnapshotCorrupt(PermanentError):
    pass


class SnapshotNotAuthentic(PermanentError):
    pass


async def _store(js: JetStreamContext, bucket: str) -> ObjectStore | None:
    try:
        return await js.object_store(bucket)
    except NotFoundError:
        return None


async def list_snapshots(js: JetStreamContext, cluster: str, etcd_cluster: str | None = None,
                         bucket: str = ETCD_SNAPSHOT_BUCKET) -> list[SnapshotRecord]:
    """The cluster's snapshots (of one etcd cluster if given), oldest first. Objects without a
    BKE record, or whose record names another cluster than their object name, are left out."""
    store = await _store(js, bucket)
    if store is None:
        return []
    try:
        infos = await store.list(ignore_deletes=True)
    except NotFoundError:  # an empty bucket
        return []
    out = []
    for info in infos:
        if info.deleted:
            continue
        record = record_from_headers(info.headers)
        if record is None or record.object_name != info.name or record.cluster != cluster:
            continue
        if not info.name.startswith(f"{record.cluster}/{record.etcd_cluster}/"):
            continue
        if etcd_cluster is None or record.etcd_cluster == etcd_cluster:
            out.append(record.model_copy(update={"stored_size": info.size or 0}))
    return sorted(out, key=lambda r: (r.taken_at, r.etcd_cluster, r.snapshot_id))


async def find_snapshot(js: JetStreamContext, cluster: str, etcd_cluster: str, sid: str,
                        bucket: str = ETCD_SNAPSHOT_BUCKET) -> SnapshotRecord:
    for record in await list_snapshots(js, cluster, etcd_cluster, bucket):
        if record.snapshot_id == sid:
            return record
    raise SnapshotNotFound(f"no snapshot {sid!r} of {etcd_cluster} in cluster {cluster} "
                           f"(list them with `bke etcd snapshots {cluster}`)")


async def copy_sealed(js: JetStreamContext, name: str, dest: Path, bucket: str = ETCD_SNAPSHOT_BUCKET) -> Path:
    """Write the stored (sealed) object `name` to `dest` (0600) as it is; return `dest`."""
    store = await _store(js, bucket)
    if store is None:
        raise SnapshotNotFound(f"no snapshot bucket {bucket!r}")
    with os.fdopen(_private(dest), "wb") as f:
        try:
            await store.get(name, writeinto=f)  # nats-py checks the object's digest
        except ObjectNotFoundError:
            dest.unlink(missing_ok=True)
            raise SnapshotNotFound(f"snapshot object {name!r} is gone") from None
    return dest


def _private(path: Path) -> int:
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)


def check_author(record: SnapshotRecord, key: SnapshotKey, author: X25519PublicKey) -> None:
    """The record was written by `author`, the agent key BKE provisioned for `record.node`."""
    if record.agent_id != agent_key_id(author) or not key.record_mac_ok(author, record_bytes(record), record.mac):
        raise SnapshotNotAuthentic(
            f"snapshot {record.snapshot_id}: its record was not written by the agent BKE provisioned for "
            f"{record.node} (agent {record.agent_id or 'unknown'}); it is not opened")


async def fetch_snapshot(js: JetStreamContext, record: SnapshotRecord, key: SnapshotKey, dest: Path, *,
                         author: X25519PublicKey, bucket: str = ETCD_SNAPSHOT_BUCKET) -> Path:
    """Write the clear snapshot of `record` to `dest` (0600), checked; return `dest`. `author` is
    the agent key BKE provisioned for the record's node: nothing is read unless the record's MAC
    is that agent's."""
    check_author(record, key, author)
    sealed = dest.with_name(f".{dest.name}.sealed")
    try:
        await copy_sealed(js, record.object_name, sealed, bucket)
        digest = hashlib.sha256()
        with open(sealed, "rb") as src, os.fdopen(_private(dest), "wb") as out:
            for piece in open_stream(src.read, key.open):
                digest.update(piece)
                out.write(piece)
    finally:
        sealed.unlink(missing_ok=True)
    if digest.hexdigest() != record.sha256:
        dest.unlink(missing_ok=True)
        raise SnapshotCorrupt(f"snapshot {record.snapshot_id}: opened bytes do not match its recorded sha256")
    check_etcd_hash(dest)
    return dest
