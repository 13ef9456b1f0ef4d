"""The backups a `ReplaceFiles` step takes before it replaces anything, and how they come back.

Layout, under the agent's state directory (on a lab node: inside the node tree):

    replace-backups/<command id>/<step id>/backup.json   what was there: per file, whether it
                                                          existed, its mode, owner, sha256
    replace-backups/<command id>/<step id>/files/<n>     a copy of the n-th file (0600)

Why named after the command and the step, and why the first one is kept: a command is
re-delivered when its agent crashed before recording the result, possibly after it had
written the new files; backing up again would save the NEW bytes and make a rollback a no-op.
`backup.json` is written last, atomically: it is the commit point (copies without it are
redone, which is safe since nothing was replaced before it existed).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ..errors import PermanentStepError
from ..fsutil import fsync_dir, write_atomic

__all__ = ["BACKUP_DIR", "BACKUP_KEEP_DAYS", "backup_dir", "ensure_backup", "prune_backups", "restore"]

BACKUP_DIR = "replace-backups"
BACKUP_KEEP_DAYS = 8.0  # as long as the journal keeps command ids: no re-run can come later


def _name(part: str) -> str:
    """A file name for an id (ids hold '/' and ':'), short enough for any file system."""
    safe = quote(part, safe="-_.@")
    return safe if len(safe) <= 100 else f"{safe[:80]}-{hashlib.sha256(part.encode()).hexdigest()[:16]}"


def backup_dir(state_dir: Path, command_id: str, step_id: str) -> Path:
    return state_dir / BACKUP_DIR / _name(command_id) / _name(step_id)


def ensure_backup(where: Path, files: Sequence[tuple[str, Path]], command_id: str, step_id: str,
                  now: float) -> dict[str, Any]:
    """The backup of (node path, local path) `files`: the existing one (kept), else a new one."""
    record = where / "backup.json"
    try:
        doc: dict[str, Any] = json.loads(record.read_text())
        return doc
    except FileNotFoundError:
        pass
    copies = where / "files"
    copies.mkdir(parents=True, exist_ok=True, mode=0o700)
    entries = []
    for i, (node_path, local) in enumerate(files):
        entry: dict[str, Any] = {"path": node_path, "existed": False}
        try:
            st = os.lstat(local)
        except FileNotFoundError:
            st = None
        if st is not None:
            if not stat.S_ISREG(st.st_mode):
                raise PermanentStepError(f"{node_path}: not a regular file; refusing to replace it")
            dst = copies / str(i)
            shutil.copyfile(local, dst, follow_symlinks=False)
            os.chmod(dst, 0o600)  # a copy of a key must not be readable by others
            with open(dst, "rb") as fh:
                digest = hashlib.file_digest(fh, "sha256").hexdigest()
            entry.update(existed=True, copy=f"files/{i}", mode=stat.S_IMODE(st.st_mode), uid=st.st_uid,
                         gid=st.st_gid, sha256=digest)
        entries.append(entry)
    doc = {"version": 1, "commandId": command_id, "stepId": step_id, "at": now, "files": entries}
    write_atomic(record, json.dumps(doc, indent=1).encode(), 0o600)
    return doc


def prune_backups(state_dir: Path, keep: Path, now: float) -> None:
    """Remove the backups of commands older than BACKUP_KEEP_DAYS (never `keep`)."""
    top = state_dir / BACKUP_DIR
    for cmd in top.glob("*") if top.is_dir() else ():
        if cmd != keep and all(now - r.stat().st_mtime > BACKUP_KEEP_DAYS * 86400 for r in cmd.glob("*/backup.json")):
            shutil.rmtree(cmd, ignore_errors=True)


def _copy_atomic(src: Path, dst: Path, mode: int, uid: int | None, gid: int | None) -> None:
    """`src`'s bytes at `dst` in one rename (a binary is never read into memory)."""
    tmp = dst.with_name(f".{dst.name}.bke-restore.tmp")
    try:
        shutil.copyfile(src, tmp, follow_symlinks=False)
        if uid is not None or gid is not None:
            os.chown(tmp, -1 if uid is None else uid, -1 if gid is None else gid)
        os.chmod(tmp, mode)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, dst)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(dst.parent)


def restore(backup: dict[str, Any], where: Path, files: Sequence[tuple[str, Path]]) -> None:
    """Put (node path, local path) `files` back as the backup recorded them: a file that did
    not exist is removed; mode kept, and owner when the agent is root."""
    entries = {e["path"]: e for e in backup["files"]}
    root = os.geteuid() == 0
    for node_path, local in files:
        e = entries[node_path]
        if e["existed"]:
            _copy_atomic(where / e["copy"], local, e["mode"], e["uid"] if root else None, e["gid"] if root else None)
        else:
            local.unlink(missing_ok=True)
            fsync_dir(local.parent)
