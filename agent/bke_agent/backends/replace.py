"""`ReplaceFiles`: replace a node's files after a backup, restart, probe, roll back on failure.

kubeadm upgrades a static pod this way (kubernetes/kubernetes,
cmd/kubeadm/app/phases/upgrade/staticpods.go: `upgradeComponent` backs the old manifest up,
moves the new one in, waits for the mirror pod's hash to change (`WaitForStaticPodHashChange`:
else the OLD pod, not yet stopped by a slow kubelet, answers the health check) and for the
pod to come up, and `rollbackOldManifests` puts the backup back when it does not). Here the same holds for any file of a step (manifests, kubelet
and containerd configuration, binaries), top to bottom, each phase returning early:

1. every path goes through the backend's path policy (a refusal touches nothing);
2. inline content is decoded and checked against its sha256 (a mismatch touches nothing);
3. every file to download is staged beside its target and checked against its sha256 (a
   mismatch replaces nothing; staged files are removed);
4. the backup is ensured (see `backups`: `<state>/replace-backups/<command>/<step>/`); an
   existing one is KEPT: a re-run of the same command after a crash that wrote the new files
   must not back up the new bytes;
5. a file "changes" if its bytes or mode differ from the new ones, or if the backup records
   other bytes (that crash again: the units must still restart and the pod be waited for);
   nothing changes -> the probes only, no restart, `Skipped` (a success);
6. the new files are moved in (rename of a staged file, or an atomic write; mode from the
   step, owner kept), then `restart_units` are restarted in order;
7. within `timeout_s`: the kubelet runs a pod of every changed static pod manifest (else a
   probe could be answered by the OLD pod, still running), then every probe passes; a new pod
   whose container keeps exiting ends the wait early (`crashloop`), its reason the
   component's own last error line;
8. if not, and `rollback` is on: every changed file comes back from the backup (a file that
   did not exist is removed), units restart, the old pods and the probes are waited for
   (`rollback_timeout_s`), and the step fails saying what was rolled back and whether the old
   version answers. The step is cancelled (hard timeout, agent stop) after the write: the
   files come back from the backup before the cancellation goes on (no restart: no time).

Errors: PathRefused / PermanentStepError (1-2: nothing touched; a rollback: retrying would
break the component again, the operator decides), StepError (a download, a restart, or
unhealthy while nothing changed or `rollback` is off: may be retried).
"""
from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Protocol

from bke.contracts.agent_steps import HealthProbe, NewFile, ReplaceFiles, SystemdUnit, WaitHealth
from bke.contracts.statuses import StepResultStatus

from ..errors import NotHealthy, PermanentStepError, StepError
from ..fsutil import fsync_dir, write_atomic
from .backups import backup_dir, ensure_backup, prune_backups, restore
from .base import COMMAND_ID, StepOutcome
from .crashloop import Exits, watch_crash_loops
from .files import file_matches

__all__ = ["ReplaceOps", "ReplaceStepsMixin", "replace_files"]

MANIFESTS = PurePosixPath("/etc/kubernetes/manifests")
POD_POLL_S = 0.2


class ReplaceOps(Protocol):
    """What a backend gives the replace core (the lab and the host differ only here)."""

    def local(self, node_path: str) -> Path: ...  # the path policy; PathRefused

    async def download(self, f: NewFile, staged: Path) -> None: ...  # verified bytes at `staged`

    async def restart_unit(self, unit: str) -> None: ...  # StepError

    async def probe(self, probe: HealthProbe, timeout_s: float) -> None: ...  # NotHealthy

    # "" once the kubelet runs a pod of the manifest `node_path` holding bytes `sha256`,
    # started at or after `since` (epoch seconds); else what it runs instead
    async def pod_started(self, node_path: str, sha256: str, since: float) -> str: ...

    # how often that pod's container exited since `since` (crashloop.ExitSource)
    async def pod_exits(self, node_path: str, sha256: str, since: float, detail: bool) -> Exits: ...


@dataclass
class _File:
    new: NewFile
    local: Path
    data: bytes | None = None  # inline content, checked
    staged: Path | None = None  # a verified download beside `local`
    changed: bool = False

    @property
    def is_manifest(self) -> bool:
        return PurePosixPath(self.new.path).parent == MANIFESTS


def _inline(f: NewFile) -> bytes:
    if (f.content_b64 is None) == (f.url is None):
        raise PermanentStepError(f"{f.path}: a NewFile needs exactly one of contentB64 and url")
    try:
        data = base64.b64decode(f.content_b64 or "", validate=True)
    except binascii.Error:
        raise PermanentStepError(f"{f.path}: content is not valid base64") from None
    if hashlib.sha256(data).hexdigest() != f.sha256:
        raise PermanentStepError(f"content of {f.path} does not match its sha256")
    return data


def _owner(local: Path) -> tuple[int | None, int | None]:
    """The owner to keep when replacing `local` (only a root agent can give files away)."""
    try:
        st = os.lstat(local)
    except FileNotFoundError:
        return None, None
    return (st.st_uid, st.st_gid) if os.geteuid() == 0 else (None, None)


async def _healthy(ops: ReplaceOps, step: ReplaceFiles, pods: list[tuple[str, str]], since: float,
                   timeout_s: float, clock: Callable[[], float]) -> tuple[str, bool]:
    """("", False) when every pod of `pods` (node path, sha256) runs and every probe passes
    within `timeout_s`, else (why not, one line; whether it ended early because one of those
    pods kept exiting: `crashloop`, the component's own last error line is then the reason)."""
    if not pods:
        return await _started_and_probed(ops, step, pods, timeout_s, since, clock), False
    waiting = asyncio.ensure_future(_started_and_probed(ops, step, pods, timeout_s, since, clock))
    try:
        return await watch_crash_loops(ops, pods, since, waiting)
    finally:
        waiting.cancel()  # a cancelled step: the wait goes with it


async def _started_and_probed(ops: ReplaceOps, step: ReplaceFiles, pods: list[tuple[str, str]], timeout_s: float,
                              since: float, clock: Callable[[], float]) -> str:
    deadline = clock() + timeout_s
    for path, sha in pods:
        while (why := await ops.pod_started(path, sha, since)):
            if clock() >= deadline:
                return f"the kubelet runs no pod of the new {PurePosixPath(path).name} ({why})"
            await asyncio.sleep(POD_POLL_S)  # polling under the step's deadline
    for p in step.probes:
        try:
            await ops.probe(p, max(0.1, deadline - clock()))
        except NotHealthy as exc:
            return f"{exc.url}: {exc.last[:160]}"
    return ""


async def replace_files(step: ReplaceFiles, ops: ReplaceOps, state_dir: Path, command_id: str, *,
                        now: Callable[[], float] = time.time, clock: Callable[[], float] = time.monotonic) -> StepOutcome:
    files = [_File(f, ops.local(f.path)) for f in step.files]  # 1. path policy
    if len({f.local for f in files}) != len(files):
        raise PermanentStepError("a ReplaceFiles step names the same file twice")
    for f in files:  # 2. inline content
        if f.new.url is None or f.new.content_b64 is not None:
            f.data = _inline(f.new)
    where = backup_dir(state_dir, command_id, step.id)
    try:
        for f in files:  # 3. downloads, staged beside their targets, for files not yet in place
            if f.data is None and not file_matches(f.local, f.new.sha256, f.new.mode):
                f.local.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
                f.staged = f.local.with_name(f".{f.local.name}.bke-replace.tmp")
                await ops.download(f.new, f.staged)
        prune_backups(state_dir, where.parent, now())
        backup = ensure_backup(where, [(f.new.path, f.local) for f in files], command_id, step.id, now())  # 4.
        before = {e["path"]: e for e in backup["files"]}
        for f in files:  # 5. what changes
            e = before[f.new.path]
            was_new = e["existed"] and e["sha256"] == f.new.sha256 and e["mode"] == f.new.mode
            f.changed = not was_new or not file_matches(f.local, f.new.sha256, f.new.mode)
        changed = [f for f in files if f.changed]
        if not changed:
            why, _ = await _healthy(ops, step, [], now(), step.timeout_s, clock)
            if why:
                raise StepError(f"files unchanged, but not healthy within {step.timeout_s:g}s ({why})")
            return StepOutcome(StepResultStatus.SKIPPED, stdout=f"unchanged: {', '.join(f.new.path for f in files)}; healthy\n")
        try:  # 6.-8. from here on, a failure or a cancellation brings the backup back
            for f in changed:
                _place(f)
            for unit in step.restart_units:
                await ops.restart_unit(unit)
            pods = [(f.new.path, f.new.sha256) for f in changed if f.is_manifest]
            why, crashed = await _healthy(ops, step, pods, float(backup["at"]), step.timeout_s, clock)
            failure = why if crashed or not why else f"not healthy within {step.timeout_s:g}s ({why})"
        except StepError as exc:  # a unit that would not restart
            failure = str(exc)
        except OSError as exc:  # a write that failed half-way (disk full)
            failure = f"{type(exc).__name__}: {exc.strerror or 'error'} ({exc.filename})"
        except asyncio.CancelledError:
            if step.rollback:
                restore(backup, where, [(f.new.path, f.local) for f in files if f.changed])
            raise
    finally:
        for f in files:
            if f.staged is not None:
                f.staged.unlink(missing_ok=True)
    names = ", ".join(f.new.path for f in changed)
    if not failure:
        units = f"; restarted {', '.join(step.restart_units)}" if step.restart_units else ""
        return StepOutcome(stdout=f"replaced {names}{units}; healthy (backup: {where})\n")
    if not step.rollback:
        raise StepError(f"replaced {names}: {failure}; rollback is off: the new files stay")
    return await _roll_back(step, ops, files, backup, where, f"rolled back {names}: {failure}", now, clock)


def _place(f: _File) -> None:
    if f.staged is None and file_matches(f.local, f.new.sha256, f.new.mode):
        return  # written by a run that crashed before its restart: do not bump the mtime
    uid, gid = _owner(f.local)
    if f.staged is not None:
        if uid is not None:
            os.chown(f.staged, uid, gid if gid is not None else -1)
        os.chmod(f.staged, f.new.mode)
        os.replace(f.staged, f.local)
        fsync_dir(f.local.parent)
        f.staged = None
    elif f.data is not None:
        f.local.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        write_atomic(f.local, f.data, f.new.mode, uid=uid, gid=gid)


async def _roll_back(step: ReplaceFiles, ops: ReplaceOps, files: list[_File], backup: dict[str, Any], where: Path,
                     head: str, now: Callable[[], float], clock: Callable[[], float]) -> StepOutcome:
    head += "; the previous files are back"
    restored_at = now()
    restore(backup, where, [(f.new.path, f.local) for f in files if f.changed])
    try:
        for unit in step.restart_units:
            await ops.restart_unit(unit)
        old = {e["path"]: e for e in backup["files"]}
        pods = [(f.new.path, old[f.new.path]["sha256"]) for f in files
                if f.changed and f.is_manifest and old[f.new.path]["existed"]]
        again, _ = await _healthy(ops, step, pods, restored_at, step.rollback_timeout_s, clock)
    except StepError as exc:
        again = str(exc)
    if again:
        raise PermanentStepError(f"{head} but NOT healthy: {again}")
    raise PermanentStepError(f"{head} and healthy")


class ReplaceStepsMixin:
    """What the host and lab backends share of ReplaceFiles: the step itself, and the ReplaceOps
    that are their own systemd and health-wait steps. Each backend adds `download` and
    `pod_started`, the two that differ."""

    policy: Any
    state_dir: Path

    async def replace_files(self, step: ReplaceFiles) -> StepOutcome:
        return await replace_files(step, self, self.state_dir, COMMAND_ID.get())  # type: ignore[arg-type]

    def local(self, node_path: str) -> Path:
        return self.policy.local(node_path)  # type: ignore[no-any-return]

    async def restart_unit(self, unit: str) -> None:
        await self.systemd(SystemdUnit(id=f"restart:{unit}", unit=unit, action="restart"))  # type: ignore[attr-defined]

    async def probe(self, probe: HealthProbe, timeout_s: float) -> None:
        await self.wait_health(WaitHealth(id="probe", url=probe.url, tls=probe.tls,  # type: ignore[attr-defined]
                                          expect_status=probe.expect_status, expect_body=probe.expect_body,
                                          timeout_s=min(3600.0, timeout_s)))
