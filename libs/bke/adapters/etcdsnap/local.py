"""Restore a fetched snapshot into a fresh data dir on this machine with `etcdutl` (the same
command as each member's `RestoreEtcdMember` step), for `bke etcd restore --into DIR` and tests:
a person can start an etcd on the result and read what the cluster held.

Errors: `LocalRestoreError` (permanent) when etcdutl fails or the target is not empty.
"""
from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from bke.core.errors import PermanentError

__all__ = ["LocalRestoreError", "etcdutl_restore_argv", "restore_into"]


class LocalRestoreError(PermanentError):
    pass


def etcdutl_restore_argv(etcdutl: str, snapshot: Path, data_dir: Path, name: str, peer_url: str,
                         token: str) -> list[str]:
    """etcd's disaster-recovery restore of one member (see `restore` for the source)."""
    return [etcdutl, "snapshot", "restore", str(snapshot), "--name", name, "--initial-cluster", f"{name}={peer_url}",
            "--initial-cluster-token", token, "--initial-advertise-peer-urls", peer_url, "--data-dir", str(data_dir)]


def restore_into(etcdutl: str | Path, snapshot: Path, data_dir: Path, *, name: str = "restored",
                 peer_url: str = "http://127.0.0.1:2380", token: str = "bke-restored",
                 timeout_s: float = 600.0) -> Sequence[str]:
    """Restore `snapshot` as a one-member cluster in `data_dir` (which must not exist or be
    empty); return etcdutl's output lines. etcdutl checks etcd's own hash of the file."""
    if data_dir.exists() and any(data_dir.iterdir()):
        raise LocalRestoreError(f"{data_dir} is not empty: a restore goes into a fresh data dir")
    argv = etcdutl_restore_argv(str(etcdutl), snapshot, data_dir, name, peer_url, token)
    run = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    if run.returncode != 0:
        raise LocalRestoreError(f"etcdutl snapshot restore exited {run.returncode}: {run.stderr.strip()[-800:]}")
    return (run.stdout + run.stderr).splitlines()
