"""A real kube-apiserver on its own etcd, nothing else: no controller-manager, scheduler, kubelet
or lab. For adapters that only talk to the API (server-side apply, list, delete), where a full
real-control-plane lab would cost minutes and this costs seconds.

The binaries are the lab's (`python3 dev.py kube`, bke.lab.kube_binaries): the newest built
Kubernetes release and etcd 3.6. Without them the test is skipped (failed under
BKE_REQUIRE_REAL_CHECKS=1, as the other real checks). What is simplified, because nothing here
tests it: etcd over plain HTTP on loopback; the apiserver's serving certificate self-signed
(`--cert-dir`); the client a static token in `system:masters`. Both processes are stopped by PID.
"""
from __future__ import annotations

import ssl
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from bke.adapters.runtime.processes import ManagedProcess, free_port, poll_until, retry_start
from bke.lab.kube_binaries import locate

from ..e2e.real_cp_helpers import ETCD, MINORS, REQUIRED

__all__ = ["KubeApi", "kube_api"]

TOKEN = "bke-test-admin-token"  # a test apiserver on loopback, gone with the test


@dataclass(frozen=True)
class KubeApi:
    url: str
    version: str
    ca: Path  # the apiserver's self-signed serving certificate and its CA (`--cert-dir`)

    @property
    def kubeconfig(self) -> dict[str, Any]:
        """What the `kubernetes` client's new_client_from_config_dict takes, as admin.conf would be."""
        return {
            "apiVersion": "v1", "kind": "Config", "current-context": "test",
            "clusters": [{"name": "test", "cluster": {"server": self.url, "certificate-authority": str(self.ca)}}],
            "users": [{"name": "admin", "user": {"token": TOKEN}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "admin"}}],
        }


def _sa_keys(work: Path) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    (work / "sa.key").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                    serialization.NoEncryption()))
    (work / "sa.pub").write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                                 serialization.PublicFormat.SubjectPublicKeyInfo))


def _start_etcd(work: Path) -> tuple[ManagedProcess, str]:
    def start(_fresh: bool) -> tuple[ManagedProcess, str]:
        client, peer = free_port(), free_port()
        url = f"http://127.0.0.1:{client}"
        proc = ManagedProcess.start("etcd", [
            str(locate("etcd", ETCD)), f"--data-dir={work / 'etcd'}", f"--listen-client-urls={url}",
            f"--advertise-client-urls={url}", f"--listen-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-cluster=default=http://127.0.0.1:{peer}", "--log-level=warn"], work / "etcd.log")
        _ready(proc, lambda: _answers(f"{url}/health"), 30.0)
        return proc, url
    return retry_start("etcd", start)


def _ready(proc: ManagedProcess, probe: Callable[[], bool | None], timeout: float) -> None:
    """Poll `probe` under a deadline; a process that never answered is stopped, not left behind."""
    try:
        poll_until(lambda: proc.ensure_running() or probe(), timeout=timeout, what=proc.name, interval=0.2)
    except BaseException:
        proc.stop()
        raise


def _answers(url: str, token: str | None = None, ca: Path | None = None) -> bool | None:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    ctx = ssl.create_default_context(cafile=str(ca)) if ca is not None else None
    with urllib.request.urlopen(req, timeout=2, context=ctx) as resp:
        return True if resp.status == 200 else None


def _release() -> str:
    """The newest built Kubernetes release (any will do: the API under test is stable); skipped,
    or failed under BKE_REQUIRE_REAL_CHECKS=1, when none is built or etcd is not."""
    built = [v for v in MINORS if locate("kube-apiserver", f"v{v}") is not None]
    if built and locate("etcd", ETCD) is not None:
        return built[-1]
    reason = f"no kube-apiserver or no etcd {ETCD} built (python3 dev.py kube)"
    if REQUIRED:
        pytest.fail(f"{reason} (BKE_REQUIRE_REAL_CHECKS=1)")
    pytest.skip(reason)


def _start_apiserver(work: Path, etcd: str, release: str) -> tuple[ManagedProcess, str]:
    (work / "tokens.csv").write_text(f'{TOKEN},bke-test-admin,1,"system:masters"\n')
    _sa_keys(work)

    def start(_fresh: bool) -> tuple[ManagedProcess, str]:
        port = free_port()
        url = f"https://127.0.0.1:{port}"
        proc = ManagedProcess.start("kube-apiserver", [
            str(locate("kube-apiserver", f"v{release}")), f"--etcd-servers={etcd}", f"--secure-port={port}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--cert-dir={work / 'certs'}",
            f"--token-auth-file={work / 'tokens.csv'}", "--authorization-mode=RBAC",
            f"--service-account-key-file={work / 'sa.pub'}", f"--service-account-signing-key-file={work / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc", "--service-cluster-ip-range=10.96.0.0/16",
            "--allow-privileged=true",  # as BKE renders it: kube-proxy and calico-node run privileged
            # no kubernetes Service endpoints: 1.37 refuses to reconcile a loopback address into them
            "--endpoint-reconciler-type=none",
            "--enable-priority-and-fairness=false"], work / "kube-apiserver.log")
        _ready(proc, lambda: _answers(f"{url}/readyz", TOKEN, work / "certs" / "apiserver.crt"), 90.0)
        return proc, url
    return retry_start("kube-apiserver", start)


@pytest.fixture(scope="module")
def kube_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeApi]:
    release = _release()
    work = tmp_path_factory.mktemp("kube-api")
    etcd, etcd_url = _start_etcd(work)
    try:
        apiserver, url = _start_apiserver(work, etcd_url, release)
        try:
            yield KubeApi(url, release, work / "certs" / "apiserver.crt")
        finally:
            apiserver.stop()
    finally:
        etcd.stop()
