"""File steps shared by the host and lab backends: skip what is already in place, write the
rest atomically, remove idempotently.

Why compare before writing: a command is re-sent after a retry or a dispatcher restart, and
rewriting an identical certificate would still bump its mtime and make a watcher (the kubelet,
the stand-in) restart a pod for nothing. The comparison uses the step's sha256, so a sealed
file that is already in place is never even decrypted.
"""
from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from bke.contracts.agent_steps import RemoveFile
from bke.contracts.statuses import StepResultStatus

from ..fsutil import write_atomic
from .base import Content, StepOutcome
from .paths import PathPolicy

__all__ = ["FileStepsMixin", "ensure_file", "file_matches", "remove_path", "sha256_of"]

CHUNK = 1 << 20


def sha256_of(fd: int) -> str:
    h = hashlib.sha256()
    while chunk := os.read(fd, CHUNK):
        h.update(chunk)
    return h.hexdigest()


def file_matches(path: Path, sha256: str, mode: int, uid: int | None = None, gid: int | None = None) -> bool:
    """True if `path` is a regular file (not a symlink) with these bytes, mode and owner."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or stat.S_IMODE(st.st_mode) != mode:
            return False
        if (uid is not None and st.st_uid != uid) or (gid is not None and st.st_gid != gid):
            return False
        return sha256_of(fd) == sha256.lower()
    finally:
        os.close(fd)


def ensure_file(path: Path, content: Content, sha256: str, mode: int, *, uid: int | None = None,
                gid: int | None = None, node_path: str = "") -> StepOutcome:
    """Skip if `path` already matches, else write it (parents created 0755)."""
    if file_matches(path, sha256, mode, uid, gid):
        return StepOutcome(StepResultStatus.SKIPPED, stdout=f"{node_path or path} already up to date\n")
    data = content()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    write_atomic(path, data, mode, uid=uid, gid=gid)
    return StepOutcome(StepResultStatus.SUCCEEDED, stdout=f"wrote {node_path or path} ({len(data)} bytes, mode {mode:o})\n")


def remove_path(path: Path, node_path: str = "") -> StepOutcome:
    """Unlink a file or a symlink (never what it points to); absent is success (Skipped)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return StepOutcome(StepResultStatus.SKIPPED, stdout=f"{node_path or path} already absent\n")
    return StepOutcome(StepResultStatus.SUCCEEDED, stdout=f"removed {node_path or path}\n")


class FileStepsMixin:
    """The file steps a backend carries out the same way wherever its files live: under its own
    path policy (`policy`: the host's allowed directories, the lab node's tree)."""

    policy: PathPolicy

    async def remove_file(self, step: RemoveFile) -> StepOutcome:
        return remove_path(self.policy.local(step.path), step.path)
