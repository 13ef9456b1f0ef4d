"""What the real-control-plane tests share: specs at a built release, kubectl and etcdctl of the
cache, and a skip (or, under .ci/run, a failure) when the binaries are not built."""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bke.lab.kube_binaries import BUILDS, KWOK_VERSION, locate

__all__ = ["ETCD", "ETCD_35", "MINORS", "api_until", "etcdctl", "kubectl", "need_binaries", "real_spec"]

REQUIRED = os.environ.get("BKE_REQUIRE_REAL_CHECKS") == "1"
ETCD = next(b.version for b in BUILDS if b.name == "etcd" and b.version.startswith("3.6"))
ETCD_35 = next(b.version for b in BUILDS if b.name == "etcd" and b.version.startswith("3.5"))  # to upgrade from
MINORS = tuple(b.version for b in BUILDS if b.name == "kubernetes")  # every built Kubernetes release


def need_binaries(kubernetes: str) -> None:
    """Skip unless the lab's binaries of this release are built (fail under .ci/run, which builds them)."""
    missing = [f"{b} {v}" for b, v in [("kube-apiserver", kubernetes), ("kubectl", kubernetes), ("etcd", ETCD),
                                         ("etcdctl", ETCD), ("etcd", ETCD_35), ("kwok", KWOK_VERSION)]
               if locate(b, v) is None]
    if missing:
        reason = f"not built: {', '.join(missing)} (python3 dev.py kube)"
        if REQUIRED:
            pytest.fail(f"{reason} (BKE_REQUIRE_REAL_CHECKS=1)")
        pytest.skip(reason)


def real_spec(source: Path, out: Path, kubernetes: str, net: str, old_net: str = "127.0.20", etcd: str = ETCD) -> Path:
    """`source` (an example at v1.33.2 / etcd 3.5.1 on `old_net`.x) at a built release, on `net`.x."""
    text = source.read_text()
    text = text.replace("v1.33.2", f"v{kubernetes}").replace("etcdVersion: v3.5.1", f"etcdVersion: v{etcd}")
    text = text.replace(f"{old_net}.", f"{net}.")
    out.write_text(text)
    return out


def kubectl(version: str, kubeconfig: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    binary = locate("kubectl", version)
    assert binary is not None
    return subprocess.run([str(binary), f"--kubeconfig={kubeconfig}", *args], input=stdin, capture_output=True,
                          text=True, timeout=60)


def kubectl_json(version: str, kubeconfig: Path, *args: str) -> Any:
    proc = kubectl(version, kubeconfig, *args, "-o", "json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def etcdctl(endpoint: str, tls: tuple[Path, Path, Path], *args: str) -> list[str]:
    """etcdctl (the built 3.6 release) against one member with a client certificate; stdout lines."""
    binary = locate("etcdctl", ETCD)
    assert binary is not None
    ca, cert, key = tls
    proc = subprocess.run([str(binary), f"--endpoints={endpoint}", f"--cacert={ca}", f"--cert={cert}", f"--key={key}",
                           *args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return [line for line in proc.stdout.splitlines() if line]


async def api_until(ask: Callable[[], Any], done: Callable[[Any], bool], timeout_s: float = 120.0) -> Any:
    """Ask the API (`ask`, a kubectl call) until `done` says yes; its last answer. Polls once a
    second under a deadline, and the assertion shows the last answer."""
    deadline = time.monotonic() + timeout_s
    while True:
        answer = ask()
        if done(answer):
            return answer
        assert time.monotonic() < deadline, answer
        await asyncio.sleep(1.0)  # polling the API under a deadline
