"""The etcd restore's node steps: `ParkStaticPod` and `RestoreEtcdMember` (bke.contracts.agent_steps).

Why here and not in one backend: only where etcdutl is found and how a loopback URL reaches the
node differ between a host and the lab (`etcdutl_path`, `restore_url`); moving manifests,
receiving the snapshot, checking it and restoring are the same, and are the point of the steps.

`RestoreEtcdMember`, in order (each returns early on failure; the received files are always
removed):
    1. the snapshot is asked for piece by piece from the upgrader (`RestoreReceiver`), each piece
       sealed to this agent's key, and kept sealed in the agent's state dir;
    2. opened into a private clear file (0600), checked against the sha256 of the signed command
       and etcd's own trailing hash (bke.adapters.etcdsnap.delivery);
    3. the member's data dir moved aside (kept: the restore can be undone by hand); a dir left by
       a restore cut short is removed when the aside dir already holds the original;
    4. `etcdutl snapshot restore` with the step's values, revisions bumped and marked compacted
       where etcdutl can (`revision_flags`); the argv is built here, never taken from the command
       (etcd-io/website content/en/docs/v3.5/op-guide/recovery.md).
"""
from __future__ import annotations

import asyncio
import base64
import os
import shutil
import time
from pathlib import Path
from urllib.parse import urlsplit

from nats.aio.client import Client as NatsClient
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from bke.contracts.agent import node_token
from bke.contracts.agent_steps import PARKED_DIR, ParkStaticPod, RestoreEtcdMember
from bke.contracts.restore import GetRestorePiece, RestorePiece, restore_piece_subject
from bke.contracts.status import StatusError
from bke.core.errors import PermanentError
from bke.adapters.etcdsnap.delivery import open_received, receive_frames
from bke.contracts.statuses import StepResultStatus

from ..errors import PermanentStepError, StepError
from ..fsutil import fsync_dir
from ..identity import AgentIdentity
from .base import StepOutcome
from .paths import PathPolicy
from .proc import run_argv

__all__ = ["ETCD_DATA_DIRS", "RestoreReceiver", "RestoreStepsMixin", "wait_port_closed"]

# Where a restore may move and write etcd data: its own allow-list, not the backend's, so that no
# other step (a WriteFile, a ReplaceFiles) can ever touch a member's data.
ETCD_DATA_DIRS = ("/var/lib/etcd*",)
ASK_TIMEOUT_S = 60.0  # one piece: the upgrader may first copy the stored object
# How long the agent keeps asking while no upgrader answers (one restarting, or replaced by
# another replica): the restore's record is in Redis, so a new upgrader serves the same pieces.
ASK_WINDOW_S = 180.0
ASK_RETRY_S = 1.0
POLL_S = 0.25


class RestoreReceiver:
    """Asks the upgrader for a restore's snapshot on this node's own piece subject."""

    def __init__(self, nc: NatsClient, scratch: Path, cluster: str, node: str, identity: AgentIdentity) -> None:
        self.nc, self.scratch, self.cluster, self.node, self.identity = nc, scratch, cluster, node, identity

    async def _ask(self, restore_id: str, index: int) -> tuple[bytes, bool]:
        subject = restore_piece_subject(self.cluster, node_token(self.node))
        body = GetRestorePiece(restore_id=restore_id, cluster=self.cluster, node=self.node, index=index).to_bytes()
        why = ""
        deadline = time.monotonic() + ASK_WINDOW_S
        while time.monotonic() < deadline:
            try:
                msg = await self.nc.request(subject, body, timeout=ASK_TIMEOUT_S)
            except (NatsTimeout, NoRespondersError, asyncio.TimeoutError) as exc:
                # a lost reply or no upgrader right now: asked again (it keeps the last piece)
                why = f"{type(exc).__name__}: no upgrader answered on {subject} for {ASK_WINDOW_S:g}s"
                await asyncio.sleep(ASK_RETRY_S)  # back-off between tries, under the window's deadline
                continue
            if b'"bke.v1/StatusError"' in msg.data:
                err = StatusError.model_validate_json(msg.data)
                if err.reason == "Unavailable":  # the upgrader's own outage (Redis, the store): asked again
                    why = f"the upgrader could not answer: {err.message}"
                    await asyncio.sleep(ASK_RETRY_S)
                    continue
                raise StepError(f"the upgrader refused piece {index}: {err.message}")
            piece = RestorePiece.model_validate_json(msg.data)
            if piece.index != index or piece.restore_id != restore_id:
                raise StepError(f"asked for piece {index} of {restore_id}, got {piece.index} of {piece.restore_id}")
            return base64.b64decode(piece.frame_b64), piece.last
        raise StepError(f"piece {index} of the snapshot: {why}")

    async def receive(self, step: RestoreEtcdMember) -> tuple[Path, int]:
        """The checked clear snapshot (a private file the caller removes) and its piece count."""
        self.scratch.mkdir(parents=True, exist_ok=True, mode=0o700)
        sealed = self.scratch / f".restore-{step.etcd_cluster}.sealed"
        clear = self.scratch / f".restore-{step.etcd_cluster}.db"
        try:
            frames = await receive_frames(lambda i: self._ask(step.restore_id, i), sealed)
            await asyncio.to_thread(open_received, sealed, self.identity.open_sealed, clear, step.sha256)
        except PermanentError as exc:
            raise PermanentStepError(str(exc)) from None
        finally:
            sealed.unlink(missing_ok=True)
        return clear, frames


# Restoring under a running Kubernetes: every revision moves past any the apiservers' watch
# caches and clients have seen, and those before are marked compacted, so that a watch from an old
# revision is told to relist instead of missing what the restore took away (etcd-io/website
# content/en/docs/v3.6/op-guide/recovery.md, "Restoring with revision bump if needed"; the value is
# the one upstream's docs and the Kubernetes etcd task page use). etcdutl has the flags from
# 3.5.x releases after etcd PR 15119; an older etcdutl restores without them, and says so.
BUMP_REVISION = 1_000_000_000
_REVISION_FLAGS: dict[str, tuple[str, ...]] = {}


async def revision_flags(etcdutl: str) -> tuple[str, ...]:
    if etcdutl not in _REVISION_FLAGS:
        run = await run_argv([etcdutl, "snapshot", "restore", "--help"])
        known = b"--bump-revision" in run.stdout + run.stderr and b"--mark-compacted" in run.stdout + run.stderr
        _REVISION_FLAGS[etcdutl] = ("--bump-revision", str(BUMP_REVISION), "--mark-compacted") if known else ()
    return _REVISION_FLAGS[etcdutl]


async def wait_port_closed(url: str, timeout_s: float) -> None:
    """Until nothing accepts a connection on `url`'s host and port (the pod's process is gone).
    A TCP connect rather than a request: a TLS port with client authentication refuses an
    anonymous request while it still runs."""
    u = urlsplit(url)
    host, port = u.hostname or "127.0.0.1", u.port or (443 if u.scheme == "https" else 80)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 2.0)
        except (OSError, asyncio.TimeoutError):
            return
        writer.close()
        if time.monotonic() >= deadline:
            raise StepError(f"{host}:{port} still accepts connections {timeout_s:g}s after the manifest was taken "
                            "away; is the kubelet running?")
        await asyncio.sleep(POLL_S)  # polling under the step's deadline


class RestoreStepsMixin:
    """Needs `policy` (PathPolicy), `restores` (RestoreReceiver | None), `etcdutl_path()` and
    `restore_url(url)` from the backend."""

    policy: PathPolicy
    restores: RestoreReceiver | None

    def etcdutl_path(self) -> str:
        raise NotImplementedError

    def restore_url(self, url: str) -> str:
        return url

    async def park_static_pod(self, step: ParkStaticPod) -> StepOutcome:
        name = Path(step.manifest).name
        home, parked = self.policy.local(step.manifest), self.policy.local(f"{PARKED_DIR}/{name}")
        src, dst = (home, parked) if step.parked else (parked, home)
        moved = src.exists()
        if moved:
            dst.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.replace(src, dst)  # one file system: an atomic rename
            fsync_dir(dst.parent)
        elif not dst.exists():
            raise PermanentStepError(f"{step.manifest}: neither it nor its parked copy exists on this node")
        if step.parked and step.port_url:
            await wait_port_closed(self.restore_url(step.port_url), max(1.0, step.timeout_s - 5.0))
        where = "parked in " + PARKED_DIR if step.parked else "back in the kubelet's manifest dir"
        return StepOutcome(StepResultStatus.SUCCEEDED if moved else StepResultStatus.SKIPPED,
                           stdout=f"{step.manifest}: {where}\n")

    async def restore_etcd_member(self, step: RestoreEtcdMember) -> StepOutcome:
        if self.restores is None:
            raise PermanentStepError("this agent cannot receive a snapshot (it was started without a bus)")
        etcd_data = PathPolicy(self.policy.root, ETCD_DATA_DIRS)
        data, aside = etcd_data.local(step.data_dir), etcd_data.local(step.aside_dir)
        clear, frames = await self.restores.receive(step)
        try:
            if data.exists() and not aside.exists():
                os.replace(data, aside)  # the old data is kept, never deleted
            elif data.exists():
                shutil.rmtree(data)  # a restore cut short: the original is already aside
            etcdutl = self.etcdutl_path()
            argv = [etcdutl, "snapshot", "restore", str(clear), "--name", step.member,
                    "--initial-cluster", step.initial_cluster, "--initial-cluster-token", step.token,
                    "--initial-advertise-peer-urls", step.peer_url, "--data-dir", str(data),
                    *await revision_flags(etcdutl)]
            run = await run_argv(argv)
        finally:
            clear.unlink(missing_ok=True)
        if run.exit_code != 0:
            why = f"etcdutl snapshot restore exited {run.exit_code}"
            raise StepError(why, exit_code=run.exit_code, stdout=run.stdout, stderr=run.stderr + f"\n{why}\n".encode())
        bumped = (f"revisions bumped by {BUMP_REVISION} and marked compacted" if "--bump-revision" in argv
                  else "revisions NOT bumped (this etcdutl has no --bump-revision: watchers must relist by hand)")
        return StepOutcome(stdout=(
            f"{step.member} of {step.etcd_cluster} restored from the snapshot ({frames} pieces received sealed to "
            f"this agent, sha256 {step.sha256[:16]} and etcd's hash checked) into {step.data_dir} as a member of a "
            f"new cluster (token {step.token}), {bumped}; the old data is kept at {step.aside_dir}\n"))
