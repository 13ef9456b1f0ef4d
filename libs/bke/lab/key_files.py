"""The lab's at-rest keys: one file per kind, each process given only the kinds it uses.

    <lab>/keys/<kind>.key   0600 in a 0700 directory, one per kind of bke.core.secrets.key_kinds

A service gets `BKE_KEY_FILE_<KIND>` for the kinds SERVICE_KEY_KINDS gives it and nothing else
(no BKE_SECRET_KEY_FILE): the planner `plan`, the renderer `render`, the agents none. The lab's
runtime takes `authority.key` (the NATS seeds) and `snapshot.key` (`bke state init`'s part),
the CLI's `--workdir` commands the kind they need (`lab_key_file`).

A work directory made before keys had kinds has one `secret.key`: each kind's file starts as a
copy of it, so what it encrypted still opens; `bke keys rotate KIND --workdir` then gives the
kind a key of its own.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from bke.core.secrets.at_rest import create_key_file
from bke.core.secrets.key_kinds import KIND_NAMES, SERVICE_KEY_KINDS, key_file_env

__all__ = ["LEGACY_KEY_FILE", "ensure_lab_key_files", "lab_key_dir", "lab_key_file", "service_key_env"]

LEGACY_KEY_FILE = "secret.key"  # a work directory's one key before kinds


def lab_key_dir(workdir: Path) -> Path:
    return workdir / "keys"


def lab_key_file(workdir: Path, kind: str) -> Path:
    key_file_env(kind)  # an unknown kind: ValueError
    return lab_key_dir(workdir) / f"{kind}.key"


def ensure_lab_key_files(workdir: Path) -> dict[str, Path]:
    """Every kind's file, made if missing (a copy of a legacy `secret.key`, else a new key)."""
    folder = lab_key_dir(workdir)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    legacy = workdir / LEGACY_KEY_FILE
    files = {}
    for kind in KIND_NAMES:
        path = lab_key_file(workdir, kind)
        if not path.exists():
            if legacy.is_file():
                tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
                shutil.copyfile(legacy, tmp)
                os.chmod(tmp, 0o600)
                os.replace(tmp, path)
            else:
                try:
                    create_key_file(path)
                except FileExistsError:
                    pass  # made by a concurrent start
        files[kind] = path
    return files


def service_key_env(workdir: Path, service: str) -> dict[str, str]:
    """The key files `service` is given (none for a service that keeps no secret)."""
    return {key_file_env(kind): str(lab_key_file(workdir, kind)) for kind in SERVICE_KEY_KINDS.get(service, ())}
