"""Two pytest-xdist workers on two cores, each with a loopback of its own.

The labs and many server tests bind fixed addresses: a lab's hosts are 127.0.10.x from the
example specs, their etcd and apiservers on the standard ports. Two of them at once on one
loopback would collide. So every worker but the first moves into a network namespace of its own
before any fixture starts a server (`unshare(CLONE_NEWNET)`, root only); its 127.0.0.0/8 is a
fresh one, and the lab it runs cannot see the other worker's. The host's other interfaces are
mirrored there as links of the same names, since rendered configs name them (keepalived
refuses a VRRP instance on an interface that does not exist). The workers talk to the controller
over pipes, which a network namespace does not touch.

Scheduling (`ModuleScheduling`): each test module is one unit, so a module-scoped lab fixture
starts once, and the modules that run real apiservers share one unit (two of them side by side
on two cores leave an apiserver too slow to come back after a restore); the heavy tiers are queued first and the many small unit modules fill the tail.
`python3 dev.py test` runs two workers when this host lets it take a network namespace (root),
else one process as before. A worker's own namespace has no route out: the few tests that reach
the package index run that call through the host's network (`in_host_network`).
"""
from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import struct
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from xdist.scheduler import LoadScopeScheduling

__all__ = ["ModuleScheduling", "in_host_network", "isolate_worker", "order"]

CLONE_NEWNET = 0x40000000
T = TypeVar("T")
# the network namespace this worker started in (the host's), kept open once it has left it: the
# few tests that reach the package index go back to it for that (in_host_network)
_host_net: int | None = None
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
# modules that run real Kubernetes control planes: one after another, on one worker
REAL_CONTROL_PLANE = ("tests/e2e/test_lab_real_control_plane.py", "tests/e2e/test_lab_real_scale.py")
# heaviest first, so that the long scenarios start early and short unit modules fill the tail
TIER_ORDER = ("e2e", "faults", "integration", "memory", "badinput", "deploy", "security", "contract", "unit")


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifr = fcntl.ioctl(s, SIOCGIFFLAGS, struct.pack("16sH14s", b"lo", 0, b""))
        flags = struct.unpack("16sH", ifr[:18])[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH14s", b"lo", flags | IFF_UP, b""))


def isolate_worker(worker: str) -> None:
    """Move this worker (every one but gw0) into a network namespace of its own, loopback up.
    Namespaces are per thread: this runs on the main thread, which runs the tests and starts every
    server and thread after it, so they all inherit it."""
    if worker in ("", "gw0"):
        return
    global _host_net
    host_links = sorted(p.name for p in Path("/sys/class/net").iterdir() if p.name != "lo")
    libc = ctypes.CDLL(None, use_errno=True)
    _host_net = os.open("/proc/self/ns/net", os.O_RDONLY)
    if libc.unshare(CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise pytest.UsageError(f"worker {worker}: unshare(CLONE_NEWNET) failed: {os.strerror(err)}; "
                                "run the suite without -n (labs of two workers would share one loopback)")
    _loopback_up()
    for i, name in enumerate(host_links):
        _mirror_link(name, f"bke-mirror{i}")


def in_host_network(fn: Callable[[], T]) -> T:
    """`fn()` with the host's network: the worker's own loopback has no route out, and a test
    that reaches the package index (pip fetching a build backend or downloading wheels) needs one.
    It runs on a thread of its own that joins the host's namespace (a network namespace is a
    thread's, and the processes it starts inherit it); the worker's other threads stay where
    they are. In the first worker, or without workers, `fn()` as it is."""
    if _host_net is None:
        return fn()
    out: list[T] = []
    failed: list[BaseException] = []

    def run() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.setns(_host_net, CLONE_NEWNET) != 0:
            failed.append(OSError(ctypes.get_errno(), "setns to the host's network namespace failed"))
            return
        try:
            out.append(fn())
        except BaseException as exc:  # noqa: BLE001 - raised again on the caller's thread
            failed.append(exc)

    thread = threading.Thread(target=run, name="host-network")
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    return out[0]


def _mirror_link(name: str, peer: str) -> None:
    """A link named like one of the host's, up: a dummy where the kernel has the module, else a
    veth pair (this machine's kernel has no dummy). Best effort: where `ip` is missing, so is
    keepalived, the one program that needs them."""
    for kind in (["dummy"], ["veth", "peer", "name", peer]):
        try:
            if subprocess.run(["ip", "link", "add", name, "type", *kind], capture_output=True, timeout=10).returncode == 0:
                subprocess.run(["ip", "link", "set", name, "up"], capture_output=True, timeout=10)
                return
        except (OSError, subprocess.SubprocessError):
            return


def order(items: list[pytest.Item]) -> None:
    """Queue the heavy tiers first; the order inside a tier is kept."""
    def tier(item: pytest.Item) -> int:
        parts = item.nodeid.split("/")
        name = parts[1] if len(parts) > 2 and parts[0] == "tests" else ""
        return TIER_ORDER.index(name) if name in TIER_ORDER else len(TIER_ORDER)

    items.sort(key=tier)


def unit_of(nodeid: str) -> str:
    """The xdist work unit of a test: its module, or the real control planes' shared unit."""
    module = nodeid.split("::", 1)[0]
    return "real-control-plane" if module in REAL_CONTROL_PLANE else module


class ModuleScheduling(LoadScopeScheduling):
    """pytest-xdist's scope scheduling with `unit_of` as the scope. (Its own `loadgroup` marks
    no longer reach the scheduler under pytest 9, which made node ids read-only.)"""

    def _split_scope(self, nodeid: str) -> str:
        return unit_of(nodeid)
