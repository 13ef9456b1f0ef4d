"""The VIP in a real-control-plane lab whose masters have network namespaces (bke.lab.netns): who
holds it, asked of the kernel (`ip -n <namespace> addr`), and a crash of its holder mid-upgrade.

`VipHolders` samples every master's namespace every 100 ms and records each change of the set
of namespaces holding the VIP. `VipCrash` waits for the upgrade's kube-apiserver step (the
first master whose kube-apiserver manifest names the new release), then SIGKILLs the VIP holder's
keepalived (every process of it, as an OOM kill of its container would: with its parent alone
SIGKILLed, keepalived's VRRP child stops cleanly, sending priority 0, which is not a crash),
waits for another master to hold the VIP, then SIGKILLs the first holder's kube-apiserver. The
kubelet stand-in restarts both.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from bke.lab.netns import LabNetwork
from bke.lab.netns_ops import recorded_network

from .real_cp_watch import _Sampler

__all__ = ["VipCrash", "VipHolders", "lab_network"]


def lab_network(workdir: Path) -> LabNetwork | None:
    return recorded_network(workdir)


def holders_now(net: LabNetwork, hosts: list[str]) -> tuple[str, ...]:
    out = []
    for h in net.hosts:
        if h.hostname in hosts:
            shown = subprocess.run(["ip", "-n", h.netns, "-4", "-o", "addr", "show"], capture_output=True, text=True,
                                   timeout=10).stdout
            if f" {net.vip}/" in shown:
                out.append(h.hostname)
    return tuple(out)


class VipHolders(_Sampler):
    def __init__(self, net: LabNetwork, hosts: list[str]) -> None:
        super().__init__()
        self.net, self.hosts = net, hosts
        self.changes: list[tuple[float, tuple[str, ...]]] = []

    @property
    def current(self) -> tuple[str, ...]:
        return self.changes[-1][1] if self.changes else ()

    def sample(self) -> None:
        now = holders_now(self.net, self.hosts)
        if now != self.current:
            self.changes.append((time.time(), now))

    def moves(self) -> list[tuple[float, tuple[str, ...]]]:
        """Each time a master that did not hold the VIP took it (a gratuitous ARP sent the
        endpoint's traffic to another master)."""
        out, before = [], self.changes[0][1] if self.changes else ()
        for t, now in self.changes[1:]:
            if set(now) - set(before):
                out.append((t, now))
            before = now
        return out


def _pod_pid(root: Path, pod: str) -> int:
    doc = json.loads((root / "var/lib/bke-lab/pods" / f"{pod}.json").read_text())
    assert doc.get("mode") == "real" and isinstance(doc.get("pid"), int), doc
    return int(doc["pid"])


def kill_tree(pid: int) -> list[int]:
    """SIGKILL `pid` and its children (children first: none of them gets to clean up)."""
    children = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    killed = []
    for p in [*map(int, children), pid]:
        try:
            os.kill(p, signal.SIGKILL)
            killed.append(p)
        except ProcessLookupError:
            pass
    return killed


@dataclass
class VipCrash:
    """Run in a thread beside the upgrade; `events` says what it did and when."""
    workdir: Path
    holders: VipHolders
    newer: str
    apiservers: list[str]
    timeout_s: float = 600.0
    events: list[tuple[float, str]] = field(default_factory=list)
    error: str = ""
    holder: str = ""
    _thread: threading.Thread | None = None

    def start(self) -> "VipCrash":
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def join(self) -> None:
        assert self._thread is not None
        self._thread.join(timeout=self.timeout_s)

    def _until(self, what: str, done, within_s: float) -> bool:
        deadline = time.monotonic() + within_s
        while not done():
            if time.monotonic() > deadline:
                self.error = f"timed out waiting for {what}"
                return False
            time.sleep(0.1)  # polling the lab under a deadline
        return True

    def _apiserver_step(self) -> bool:
        for h in self.apiservers:
            manifest = self.workdir / "hosts" / h / "etc/kubernetes/manifests/kube-apiserver.yaml"
            try:
                if f":v{self.newer}" in manifest.read_text():
                    return True
            except OSError:
                continue
        return False

    def _run(self) -> None:
        if not self._until("the kube-apiserver step", self._apiserver_step, self.timeout_s):
            return
        self.events.append((time.time(), "kube-apiserver step started"))
        if not self._until("one VIP holder", lambda: len(self.holders.current) == 1, 30.0):
            return
        self.holder = holder = self.holders.current[0]
        root = self.workdir / "hosts" / holder
        kill_tree(_pod_pid(root, "keepalived"))
        self.events.append((time.time(), f"SIGKILL keepalived on {holder}"))
        # the crashed holder keeps the address until its keepalived restarts and removes it (as on
        # a real host); the VIP has moved once another master holds it and sent its gratuitous ARP
        if not self._until("another master to hold the VIP", lambda: bool(set(self.holders.current) - {holder}), 30.0):
            return
        self.events.append((time.time(), f"VIP on {','.join(self.holders.current)}"))
        kill_tree(_pod_pid(root, "kube-apiserver"))
        self.events.append((time.time(), f"SIGKILL kube-apiserver on {holder}"))


# A failure counts against an event when it happened this long after it: a request in flight on
# the old holder is reset by the new one (or by haproxy when its apiserver dies) within a second
# or two, and one the kernel dropped meanwhile gives up at the probe's 5 s timeout at the latest.
EXPLAIN_WINDOW_S = 6.0


def vip_failures_explained(failures: list[tuple[float, str]], moves: list[tuple[float, tuple[str, ...]]],
                           events: list[tuple[float, str]]) -> list[tuple[float, str]]:
    """The failures no event explains. Each VIP move and each SIGKILLed apiserver may cost the one
    request in flight at that moment (the probe asks one at a time): the old holder's connections
    do not move with the VIP, and a killed apiserver's are cut. No more than one per event."""
    causes = sorted([t for t, _ in moves] + [t for t, what in events if what.startswith("SIGKILL kube-apiserver")])
    unexplained = []
    for t, why in sorted(failures):
        cause = next((c for c in causes if c - 0.5 <= t <= c + EXPLAIN_WINDOW_S), None)
        if cause is None:
            unexplained.append((t, why))
        else:
            causes.remove(cause)
    return unexplained
