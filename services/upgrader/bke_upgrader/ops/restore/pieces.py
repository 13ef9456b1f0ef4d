"""The snapshot of a running etcd restore, served piece by piece to its members' agents.

Trust (bke.adapters.etcdsnap.delivery says why the snapshot travels this way): the stored object is
sealed to the deployment's snapshot key, which this service holds; it is copied to a private
file here (still sealed) and opened piece by piece in memory, each piece sealed again to the
X25519 key BKE provisioned for the asking node (`bke:<c>:agents:provisioned`, recorded when the
operator registered the node, never taken from a message). A request is answered only for a
restore that runs, in its `restore-members` stage, for one of its members, and on that node's
own subject (bke.adapters.auth.permissions lets only that node's agent publish there).

Errors: a refused request is answered with a `StatusError` naming why (the agent's step fails
with it); an unexpected error too, as "Unavailable", so the agent never waits out its timeout.
"""
from __future__ import annotations

import asyncio
import base64
import logging
import os
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey
from nats.js import JetStreamContext
from pydantic import ValidationError

from bke.contracts.agent import node_token
from bke.contracts.agent_steps import ETCD_SNAPSHOT_BUCKET
from bke.contracts.restore import GetRestorePiece, RestorePiece
from bke.contracts.status import StatusError
from bke.core.errors import PermanentError
from bke.adapters.etcdsnap.delivery import Feed, resealed_frames
from bke.core.etcdsnap.records import object_name
from bke.core.etcdsnap.restore_run import RestoreRun
from bke.adapters.etcdsnap.store import copy_sealed
from bke.core.secrets.snapshot_key import SnapshotKey

from ...agent_keys import agent_seal_key
from .store import RestoreStore

__all__ = ["PieceServer", "RestoreRefused", "provisioned_key", "restore_dir"]

log = logging.getLogger("bke.upgrader.restore")


class RestoreRefused(PermanentError):
    pass


def restore_dir() -> Path:
    """Where the sealed copies wait while a restore runs (private to this process's user)."""
    return Path(tempfile.gettempdir()) / f"bke-upgrader-restores-{os.getuid()}"


async def provisioned_key(redis: object, cluster: str, node: str) -> X25519PublicKey:
    """The agent key BKE provisioned for `node` (what a snapshot record's MAC and a delivery are
    checked against / sealed to); RestoreRefused if none was."""
    key = await agent_seal_key(redis, cluster, node)
    if key is None:
        raise RestoreRefused(f"no agent key was provisioned for {node} in cluster {cluster}")
    return key


class PieceServer:
    def __init__(self, store: RestoreStore, js: Callable[[], JetStreamContext],
                 key: Callable[[], Awaitable[SnapshotKey]], directory: Path | None = None,
                 bucket: str = ETCD_SNAPSHOT_BUCKET) -> None:
        self.store, self.js, self.key, self.bucket = store, js, key, bucket
        self.directory = directory or restore_dir()
        self._feeds: dict[tuple[str, str], Feed] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def sealed_path(self, restore_id: str) -> Path:
        return self.directory / f"{restore_id.replace('/', '_')}.sealed"

    async def ensure_copy(self, run: RestoreRun, name: str) -> Path:
        """The stored object, copied here (sealed) once per restore; idempotent."""
        path = self.sealed_path(run.restore_id)
        lock = self._locks.setdefault(run.restore_id, asyncio.Lock())
        async with lock:
            if path.exists():
                return path
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            partial = path.with_suffix(".partial")
            await copy_sealed(self.js(), name, partial, self.bucket)
            os.replace(partial, path)
            return path

    def forget(self, restore_id: str) -> None:
        """A finished restore: its sealed copy and feeds go."""
        self.sealed_path(restore_id).unlink(missing_ok=True)
        for k in [k for k in self._feeds if k[0] == restore_id]:
            del self._feeds[k]
        self._locks.pop(restore_id, None)

    async def answer(self, subject: str, body: bytes) -> RestorePiece | StatusError:
        try:
            req = GetRestorePiece.model_validate_json(body)
        except ValidationError as exc:
            return StatusError(reason="Invalid", message=f"invalid piece request: {exc.errors()[0]['msg']}")
        try:
            return await self._piece(subject, req)
        except PermanentError as exc:
            log.warning("restore piece refused: %s", exc, extra={"cluster": req.cluster, "node": req.node,
                                                                 "request_id": req.restore_id})
            return StatusError(reason="Invalid", cluster=req.cluster, message=str(exc)[:500])
        except Exception as exc:  # noqa: BLE001 - an outage is an answer, not a dead subscription
            return StatusError(reason="Unavailable", cluster=req.cluster, message=f"{type(exc).__name__}: {exc}"[:500])

    async def answer_bytes(self, subject: str, body: bytes) -> bytes:
        """`answer`, as the reply's bytes (bke.adapters.bus.responder)."""
        return (await self.answer(subject, body)).to_bytes()

    async def _piece(self, subject: str, req: GetRestorePiece) -> RestorePiece:
        if subject.split(".")[-2:] != [req.cluster, node_token(req.node)]:
            raise RestoreRefused(f"a request for {req.node} in {req.cluster} came on {subject}")
        run = await self.store.load(req.cluster)
        if run is None or run.restore_id != req.restore_id or not run.running:
            raise RestoreRefused(f"no running etcd restore {req.restore_id} of {req.cluster}")
        stage = run.stage_now()
        if stage is None or stage.name != "restore-members" or req.node not in stage.nodes:
            raise RestoreRefused(f"restore {req.restore_id} does not deliver a snapshot to {req.node} now")
        feed = self._feeds.get((run.restore_id, req.node))
        if feed is None:
            sealed = await self.ensure_copy(run, object_name(run.cluster, run.etcd_cluster, run.snapshot_id))
            recipient = await provisioned_key(self.store.redis, run.cluster, req.node)
            key = await self.key()
            feed = Feed(lambda: resealed_frames(sealed, key.open, recipient))
            self._feeds[(run.restore_id, req.node)] = feed
        lock = self._locks.setdefault(f"{run.restore_id}/{req.node}", asyncio.Lock())
        async with lock:
            frame, last = await asyncio.to_thread(feed.frame, req.index)
        return RestorePiece(restore_id=run.restore_id, index=req.index,
                            frame_b64=base64.b64encode(frame).decode(), last=last)

