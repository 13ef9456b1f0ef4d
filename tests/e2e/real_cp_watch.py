"""Watching a real control plane while BKE changes it: what the components themselves say, sampled
from a thread alongside the operation, never BKE's own records.

- `EndpointProbe`: a client asking `/version` through the control-plane endpoint every 100 ms, each
  request on a new connection (so the balancer chooses a backend every time), counting failures.
- `VersionWatch`: every apiserver's `/version` and every controller-manager's and scheduler's
  `kubernetes_build_info` (they serve no `/version`); it records every change and every sample
  where the skew rule did not hold. A version is the last one the component reported: one
  restarting keeps it until it answers again.

etcd's quorum is sampled by the upgrader's own sampler (bke.adapters.upgrade.quorum), as in
tests/e2e/test_lab_upgrade.py.
"""
from __future__ import annotations

import base64
import re
import ssl
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import yaml

from bke.core.plan import Plan

__all__ = ["EndpointProbe", "VersionWatch", "admin_tls", "version_tuple"]

_BUILD_INFO = re.compile(r'^kubernetes_build_info\{[^}]*git_version="v?([0-9.]+)[^"]*"', re.M)
CONTROLLER_PORTS = {"kube-controller-manager": 10257, "kube-scheduler": 10259}


def version_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.lstrip("v").split("-")[0].split("."))


def admin_tls(admin_conf: Path, workdir: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(verify the cluster CA, verify nothing) contexts, both with admin.conf's client certificate:
    the controllers' and schedulers' serving certificates are self-signed."""
    doc = yaml.safe_load(admin_conf.read_text())
    user, cluster = doc["users"][0]["user"], doc["clusters"][0]["cluster"]
    pair = workdir / "watch-admin-pair.pem"
    pair.write_bytes(base64.b64decode(user["client-certificate-data"]) + b"\n" + base64.b64decode(user["client-key-data"]))
    pair.chmod(0o600)
    verified = ssl.create_default_context(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
    blind = ssl.create_default_context()
    blind.check_hostname, blind.verify_mode = False, ssl.CERT_NONE
    for ctx in (verified, blind):
        ctx.load_cert_chain(pair)
    return verified, blind


class _Sampler:
    period_s = 0.1

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.period_s)  # the client's pace, not synchronisation

    def sample(self) -> None:
        raise NotImplementedError


class EndpointProbe(_Sampler):
    def __init__(self, endpoint: str, verify: ssl.SSLContext) -> None:
        super().__init__()
        self.url, self.verify = f"https://{endpoint}/version", verify
        self.answers, self.failures = 0, list[tuple[float, str]]()

    def sample(self) -> None:
        try:
            with httpx.Client(verify=self.verify, trust_env=False, timeout=5.0) as http:
                r = http.get(self.url, headers={"Connection": "close"})
            if r.status_code != 200:
                self.failures.append((time.time(), f"{r.status_code} {r.text[:100]}"))
        except httpx.HTTPError as exc:
            self.failures.append((time.time(), f"{type(exc).__name__}: {exc}"))
        self.answers += 1


@dataclass
class VersionWatch(_Sampler):
    plan: Plan
    verified: ssl.SSLContext
    blind: ssl.SSLContext
    seen: dict[str, str] = field(default_factory=dict)  # "m1/kube-apiserver" -> last version it reported
    changes: list[tuple[float, str, str]] = field(default_factory=list)
    skew: list[str] = field(default_factory=list)  # each sample where a controller was newer than an apiserver
    samples: int = 0

    def __post_init__(self) -> None:
        super().__init__()
        self.period_s = 0.5

    def _note(self, who: str, version: str) -> None:
        if self.seen.get(who) != version:
            self.seen[who] = version
            self.changes.append((time.time(), who, version))

    def _components(self, http: httpx.Client, blind: httpx.Client) -> None:
        for node in self.plan.nodes:
            if "kube-apiserver" in node.components:
                try:
                    self._note(f"{node.hostname}/kube-apiserver", http.get(f"https://{node.ip}:6443/version").json()["gitVersion"].lstrip("v"))
                except (httpx.HTTPError, ValueError, KeyError):
                    pass  # restarting: its last version stands
            for comp, port in CONTROLLER_PORTS.items():
                if comp in node.components:
                    try:
                        found = _BUILD_INFO.search(blind.get(f"https://{node.ip}:{port}/metrics").text)
                    except httpx.HTTPError:
                        continue
                    if found:
                        self._note(f"{node.hostname}/{comp}", found.group(1))

    def sample(self) -> None:
        with httpx.Client(verify=self.verified, trust_env=False, timeout=2.0) as http, \
                httpx.Client(verify=self.blind, trust_env=False, timeout=2.0) as blind:
            self._components(http, blind)
        apis = [version_tuple(v) for k, v in self.seen.items() if k.endswith("/kube-apiserver")]
        ctls = {k: version_tuple(v) for k, v in self.seen.items() if not k.endswith("/kube-apiserver")}
        if apis:
            self.skew += [f"{k} {v} newer than the oldest apiserver {min(apis)}" for k, v in ctls.items() if v > min(apis)]
        self.samples += 1
