"""etcd's snapshot stream as its gRPC gateway sends it, and etcd's own integrity hash.

`POST /v3/maintenance/snapshot` (etcd 3.4+; served by the gRPC gateway on the client port,
etcd-io/etcd Documentation/dev-guide/apispec/swagger/rpc.swagger.json at v3.5.1) answers a
server-streaming call as newline-delimited JSON, one `{"result": {"blob": <base64>, ...}}` per
message. etcd sends the database in 32 KiB messages and then one more message whose blob is the
sha256 of everything before it (server/etcdserver/api/v3rpc/maintenance.go `Snapshot`, v3.5.1,
commit d42e8589). `etcdctl snapshot save` writes all blobs to the file, hash included;
`etcdutl snapshot restore` recognises the hash by the file size (`hasChecksum`: size % 512 ==
32, bolt pages being 512-byte multiples; etcdutl/snapshot/v3_snapshot.go, v3.5.1) and refuses a
file whose hash does not match. BKE keeps the file in exactly that form and checks the same
rule before storing it (`check_etcd_hash`).
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path

from bke.core.errors import PermanentError

__all__ = ["ETCD_HASH_SIZE", "EtcdSnapshotError", "check_etcd_hash", "decode_line"]

ETCD_HASH_SIZE = 32
_CHUNK = 1 << 20


class EtcdSnapshotError(PermanentError):
    """etcd answered no snapshot, or one whose own hash does not match."""


def decode_line(line: bytes) -> bytes:
    """The blob of one gateway message; an `error` message becomes EtcdSnapshotError."""
    try:
        doc = json.loads(line)
    except ValueError:
        raise EtcdSnapshotError(f"etcd's snapshot stream holds a line that is not JSON: {line[:120]!r}") from None
    if not isinstance(doc, dict):
        raise EtcdSnapshotError("etcd's snapshot stream holds a message that is not an object")
    if "error" in doc:
        err = doc["error"]
        message = err.get("message", err) if isinstance(err, dict) else err
        raise EtcdSnapshotError(f"etcd refused the snapshot: {message}")
    result = doc.get("result")
    if not isinstance(result, dict):
        raise EtcdSnapshotError("etcd's snapshot stream holds a message without a result")
    return base64.b64decode(result.get("blob", ""))


def check_etcd_hash(path: Path) -> str:
    """Check etcd's trailing sha256 of the snapshot file; return the file's own sha256."""
    size = os.path.getsize(path)
    if size < ETCD_HASH_SIZE or (size % 512) != ETCD_HASH_SIZE:
        raise EtcdSnapshotError(f"the snapshot is {size} bytes: not a database followed by etcd's sha256")
    whole, db = hashlib.sha256(), hashlib.sha256()
    left = size - ETCD_HASH_SIZE
    with open(path, "rb") as f:
        while left > 0:
            chunk = f.read(min(_CHUNK, left))
            if not chunk:
                raise EtcdSnapshotError("the snapshot file shrank while it was read")
            db.update(chunk)
            whole.update(chunk)
            left -= len(chunk)
        trailer = f.read(ETCD_HASH_SIZE)
    whole.update(trailer)
    if db.digest() != trailer:
        raise EtcdSnapshotError("etcd's own sha256 at the end of the snapshot does not match its database")
    return whole.hexdigest()
