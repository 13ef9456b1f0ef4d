"""The `EtcdSnapshot` step: snapshot the local etcd member, check it, seal it, store it.

Why here and not in one backend: only reaching the member differs between a host and the lab
(the lab maps a loopback URL to the node's address and reads TLS files under its root); taking,
checking, sealing and storing are the same, and are the point of the step.

Order (each step returns early on failure, and the clear file is always removed):
    1. Maintenance/Status: the member's revision and version (the snapshot holds at least it),
       and its database size: the scratch directory must hold it with `SPACE_MARGIN` to spare,
       because it usually shares a disk with etcd's data dir, and an etcd whose disk fills
       stops taking writes (its NOSPACE alarm) in the middle of an upgrade;
    2. Maintenance/Snapshot over the gRPC gateway into a private file (0600, agent state dir);
    3. etcd's own trailing sha256 checked (bke.adapters.etcdsnap.etcd_stream), the file's sha256 taken;
    4. sealed piece by piece to the step's recipient key and published as one object with its
       record (bke.adapters.etcdsnap.upload): publishes only, what the agent's bus identity allows.
The clear snapshot never leaves the node and never reaches a log or a step's output.
"""
from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import ssl
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx
from nats.js import JetStreamContext
from nats.js.errors import NoStreamResponseError

from bke.contracts.agent_steps import ETCD_SNAPSHOT_BUCKET, EtcdSnapshot
from bke.adapters.etcdsnap.etcd_stream import EtcdSnapshotError, check_etcd_hash, decode_line
from bke.core.etcdsnap.records import SnapshotRecord, record_bytes, record_headers
from bke.core.etcdsnap.sealed_stream import seal_stream
from bke.adapters.etcdsnap.upload import publish_object
from bke.core.secrets.sealing import agent_key_id
from bke.core.secrets.snapshot_key import SnapshotKeyError, recipient_from_b64

from ..errors import PermanentStepError, StepError
from ..identity import AgentIdentity
from .base import StepOutcome

__all__ = ["SnapshotTaker"]

_CONNECT_S = 10.0
SPACE_MARGIN = 256 << 20  # bytes left free beyond the snapshot itself


def _utc_now() -> datetime:
    return datetime.now(timezone.utc)


class SnapshotTaker:
    """Takes and stores snapshots for one agent (`cluster`, `node`, `identity`: whose MAC the
    record carries); `scratch` holds the clear file while it is checked and sealed (a private
    directory of the agent's state)."""

    def __init__(self, js: JetStreamContext, scratch: Path, cluster: str, node: str, identity: AgentIdentity, *,
                 bucket: str = ETCD_SNAPSHOT_BUCKET, now: Callable[[], datetime] = _utc_now,
                 http_transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.js, self.scratch, self.cluster, self.node, self.identity = js, scratch, cluster, node, identity
        self.bucket, self.now, self.http_transport = bucket, now, http_transport

    async def take(self, step: EtcdSnapshot, url: str, verify: ssl.SSLContext | bool) -> StepOutcome:
        try:
            recipient = recipient_from_b64(step.recipient_b64)
        except SnapshotKeyError as exc:
            raise PermanentStepError(str(exc)) from None
        self.scratch.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = self.scratch / f".etcd-snapshot-{secrets.token_hex(8)}.db"
        base = url.rstrip("/")
        try:
            taken_at = self.now().isoformat()
            # a snapshot may take minutes: the step's own timeout bounds it, not a read timeout
            timeout = httpx.Timeout(_CONNECT_S, read=step.timeout_s)
            async with httpx.AsyncClient(verify=verify, trust_env=False, timeout=timeout,
                                         transport=self.http_transport) as client:
                status = await _post_json(client, f"{base}/v3/maintenance/status")
                _check_space(self.scratch, int(status.get("dbSize", 0)))
                await _download(client, f"{base}/v3/maintenance/snapshot", path)
            sha256 = await asyncio.to_thread(check_etcd_hash, path)
            size = path.stat().st_size
            record = SnapshotRecord(
                snapshot_id=step.snapshot_id, cluster=self.cluster, etcd_cluster=step.etcd_cluster,
                member=step.member, node=self.node, revision=int(status.get("header", {}).get("revision", 0)),
                etcd_version=str(status.get("version", "")), size=size, sha256=sha256,
                sealed_to=agent_key_id(recipient), taken_at=taken_at, request_id=step.request_id,
                object_name=step.object_name, agent_id=self.identity.agent_id)
            record = record.model_copy(update={"mac": self.identity.snapshot_record_mac(recipient, record_bytes(record))})
            with open(path, "rb") as f:
                info = await publish_object(
                    self.js, self.bucket, step.object_name, seal_stream(f.read, recipient),
                    headers=record_headers(record), now=self.now(),
                    description=f"etcd snapshot of {step.etcd_cluster} ({step.member}) in {self.cluster}")
        except EtcdSnapshotError as exc:
            raise StepError(str(exc)) from None
        except NoStreamResponseError:
            # the deploy step declares the store (bke.adapters.bus.streams.ensure_buckets); the agent may
            # not make it (no JetStream API on it)
            raise StepError(f"the snapshot store {self.bucket!r} does not exist on the bus; nothing was stored") from None
        finally:
            path.unlink(missing_ok=True)
        return StepOutcome(stdout=(
            f"snapshot {step.snapshot_id} of {step.etcd_cluster} member {step.member}: revision {record.revision}, "
            f"{size} bytes, sha256 {sha256}, etcd's hash checked; stored sealed to key {record.sealed_to} "
            f"as {self.bucket}/{step.object_name} ({info.size} bytes)\n"))


def _check_space(scratch: Path, db_size: int) -> None:
    free = shutil.disk_usage(scratch).free
    if free < db_size + SPACE_MARGIN:
        raise StepError(f"not enough free space in {scratch} for a {db_size >> 20} MiB snapshot: {free >> 20} MiB free, "
                        f"{(db_size + SPACE_MARGIN) >> 20} MiB needed (the snapshot plus {SPACE_MARGIN >> 20} MiB to "
                        "spare); nothing was taken")


async def _post_json(client: httpx.AsyncClient, url: str) -> dict[str, Any]:
    try:
        resp = await client.post(url, json={})
    except httpx.HTTPError as exc:
        raise StepError(f"{url}: {type(exc).__name__}: {exc}") from None
    if resp.status_code != 200:
        raise StepError(f"{url}: HTTP {resp.status_code} {resp.text[:200]}")
    body = resp.json()
    return body if isinstance(body, dict) else {}


async def _download(client: httpx.AsyncClient, url: str, path: Path) -> None:
    """The gateway's stream of messages, each blob appended to `path` (0600)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        try:
            async with client.stream("POST", url, json={}) as resp:
                if resp.status_code != 200:
                    body = (await resp.aread())[:200]
                    raise StepError(f"{url}: HTTP {resp.status_code} {body!r}")
                async for line in resp.aiter_lines():
                    if line.strip():
                        f.write(decode_line(line.encode()))
        except httpx.HTTPError as exc:
            raise StepError(f"{url}: {type(exc).__name__}: {exc}") from None
        f.flush()
        os.fsync(f.fileno())
