"""Small file-system helpers shared by the journal, the identity and the backends.

Why in one place: "atomic" must mean the same everywhere: a temporary file in the target's
own directory, written, fsynced, renamed over the target, then the directory fsynced, so a
crash leaves either the old file or the new one, never a torn one.
"""
from __future__ import annotations

import os
import secrets
from pathlib import Path

__all__ = ["fsync_dir", "write_atomic"]


def fsync_dir(path: Path) -> None:
    """Make a rename or a new name in `path` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes, mode: int, *, uid: int | None = None, gid: int | None = None,
                 fsync: bool = True) -> None:
    """Replace `path` with `data` (mode, and owner when given) in one rename.

    The temporary file is created 0600 and only then given its final mode and owner, so a
    key is never readable by others, not even for a moment. A symlink at `path` is replaced,
    never followed.
    """
    tmp = path.with_name(f".{path.name}.bke-{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if uid is not None or gid is not None:
                os.fchown(f.fileno(), -1 if uid is None else uid, -1 if gid is None else gid)
            os.fchmod(f.fileno(), mode)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if fsync:
        fsync_dir(path.parent)
