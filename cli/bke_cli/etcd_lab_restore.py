"""The lab's `RestorePort` (bke.etcdsnap.restore): a restore acted out on the lab's node trees.

Why the lab acts on the trees itself: the restore over agent commands is not built (no agent
step moves a file or receives a multi-MiB snapshot yet). In the lab every node is a directory
of this machine, watched by its kubelet stand-in, so a manifest moved out of
`etc/kubernetes/manifests` stops its pod and moved back starts it, exactly as on a node; the
members are real etcd processes and etcdutl is the venv's. What this rehearses is the plan
itself: the order, etcdutl's flags for every member, a new cluster forming, the apiservers
coming back. A pod's state is read from the stand-in's status files (bke_agent.LabLayout).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from bke.errors import PermanentError
from bke_agent.lablayout import LabLayout

__all__ = ["LabRestorePort", "LabRestoreError"]


class LabRestoreError(PermanentError):
    pass


class LabRestorePort:
    def __init__(self, workdir: Path, snapshot: Path, etcdutl: Path, *, timeout_s: float = 120.0,
                 poll_s: float = 0.2) -> None:
        self.hosts = workdir / "hosts"
        self.snapshot, self.etcdutl = snapshot, etcdutl
        self.timeout_s, self.poll_s = timeout_s, poll_s

    def _local(self, node: str, path: str) -> Path:
        p = PurePosixPath(path)
        if not p.is_absolute() or ".." in p.parts:
            raise LabRestoreError(f"{path!r}: not an absolute node path")
        return self.hosts / node / p.relative_to("/")

    def move(self, node: str, src: str, dst: str) -> None:
        s, d = self._local(node, src), self._local(node, dst)
        if s.exists():
            d.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
            os.replace(s, d)
        elif not d.exists():
            raise LabRestoreError(f"{node}: neither {src} nor {dst} exists")

    def put_snapshot(self, node: str, path: str) -> None:
        dest = self._local(node, path)
        dest.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as out, open(self.snapshot, "rb") as src:
            shutil.copyfileobj(src, out, 1 << 20)

    def remove(self, node: str, path: str) -> None:
        self._local(node, path).unlink(missing_ok=True)

    def restore_member(self, node: str, argv: Sequence[str], data_dir: str, aside: str) -> None:
        data, kept = self._local(node, data_dir), self._local(node, aside)
        if data.exists() and not kept.exists():
            os.replace(data, kept)  # the old data is kept, never deleted
        elif data.exists():
            shutil.rmtree(data)  # a restore cut short: the original is already aside
        args = list(argv)
        args[0] = str(self.etcdutl)
        args[3] = str(self._local(node, args[3]))  # the snapshot file
        at = args.index("--data-dir") + 1
        args[at] = str(self._local(node, args[at]))
        run = subprocess.run(args, capture_output=True, text=True, timeout=600, check=False)
        if run.returncode != 0:
            raise LabRestoreError(f"{node}: etcdutl snapshot restore exited {run.returncode}: "
                                  f"{run.stderr.strip()[-600:]}")

    def _pod_name(self, node: str, manifest: str) -> str:
        doc: dict[str, Any] = yaml.safe_load(self._local(node, manifest).read_text())
        return str(doc["metadata"]["name"])

    def _wait(self, pods: Sequence[tuple[str, str]], what: str, done: Any) -> None:
        names = [(node, self._pod_name(node, manifest)) for node, manifest in pods]
        deadline = time.monotonic() + self.timeout_s
        while True:
            left = [(n, p) for n, p in names if not done(LabLayout(self.hosts / n).pod_status(p))]
            if not left:
                return
            if time.monotonic() > deadline:
                raise LabRestoreError(f"timed out after {self.timeout_s:g}s waiting for {what}: "
                                      + ", ".join(f"{p} on {n}" for n, p in left))
            time.sleep(self.poll_s)  # polling the stand-in's status files under a deadline

    def wait_stopped(self, pods: Sequence[tuple[str, str]]) -> None:
        self._wait(pods, "pods to stop", lambda st: st is None or st.get("phase") == "Stopped")

    def wait_running(self, pods: Sequence[tuple[str, str]]) -> None:
        self._wait(pods, "pods to run and be ready",
                   lambda st: st is not None and st.get("phase") == "Running" and st.get("ready") is True)
