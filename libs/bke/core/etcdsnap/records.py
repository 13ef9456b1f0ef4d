"""What BKE records about one stored etcd snapshot, and how it sits in the object store.

One object per snapshot in the `ETCD_SNAPSHOT_BUCKET` JetStream object store, named
`<cluster>/<etcd cluster>/<snapshot id>`; its bytes are the sealed stream (`sealed_stream`), its
metadata a `SnapshotRecord` carried as one object header (`Bke-Snapshot-V1`, JSON) so that the
listing needs no chunk. The record is written by the agent that took the snapshot, with a MAC
only that agent and the holder of the snapshot key can make (bke.core.secrets.snapshot_key): BKE
opens a snapshot only if its record's MAC checks against the agent key it provisioned for the
node, and its bytes against the record's sha256.

The snapshot id is chosen by whoever asks for the snapshot (`snapshot_id`): UTC time first so
that ids sort by age, then the member, so that a person can type it (`bke etcd restore
--snapshot ID`).
"""
from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from typing import Any

from pydantic import Field

from bke.contracts.base import Message

__all__ = ["RECORD_HEADER", "SnapshotRecord", "object_name", "record_bytes", "record_from_headers", "record_headers",
           "snapshot_id"]

RECORD_HEADER = "Bke-Snapshot-V1"
_ID_PART = re.compile(r"[^a-z0-9.-]+")


class SnapshotRecord(Message):
    """One stored snapshot. `revision` is the member's revision just before the snapshot
    (the snapshot holds at least it); `size` and `sha256` are of the clear snapshot file as
    etcd sent it (etcd's own trailing sha256 included, what `etcdutl snapshot restore` checks);
    `stored_size` is of the sealed object; `sealed_to` names the snapshot key (its key id);
    `agent_id` the key of the agent that wrote it, `mac` that agent's MAC over `record_bytes`."""

    version: int = 1
    snapshot_id: str
    cluster: str
    etcd_cluster: str
    member: str
    node: str
    revision: int = Field(ge=0)
    etcd_version: str = ""
    size: int = Field(ge=0)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    stored_size: int = Field(0, ge=0)
    sealed_to: str
    taken_at: str
    request_id: str = ""
    object_name: str
    agent_id: str = ""
    mac: str = ""


def record_bytes(record: SnapshotRecord) -> bytes:
    """What the MAC covers: the record's canonical JSON without the MAC and without `stored_size`
    (filled in from the object's meta when listed)."""
    doc = record.model_dump(mode="json", by_alias=True, exclude={"mac", "stored_size"})
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def snapshot_id(now: datetime, member: str) -> str:
    """`20261201t091500z-<member>`: sorts by time, typeable, valid in an object name."""
    stamp = now.astimezone(timezone.utc).strftime("%Y%m%dt%H%M%Sz")
    return f"{stamp}-{_ID_PART.sub('-', member.lower()).strip('-')}"[:128]


def object_name(cluster: str, etcd_cluster: str, sid: str) -> str:
    return f"{cluster}/{etcd_cluster}/{sid}"


def record_headers(record: SnapshotRecord) -> dict[str, list[str]]:
    """Object headers as nats.go spells them (map of lists), so Go tools read them too."""
    return {RECORD_HEADER: [record.model_dump_json(by_alias=True)]}


def record_from_headers(headers: dict[str, Any] | None) -> SnapshotRecord | None:
    """The record of an object, or None if it carries none (not a BKE snapshot)."""
    if not headers or RECORD_HEADER not in headers:
        return None
    value = headers[RECORD_HEADER]
    text = value[0] if isinstance(value, list) and value else value
    if not isinstance(text, str):
        return None
    return SnapshotRecord.model_validate(json.loads(text))
