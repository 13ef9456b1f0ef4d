"""Two pytest-xdist workers on two cores, each with a loopback of its own.

The labs and many server tests bind fixed addresses: a lab's hosts are 127.0.10.x from the
example specs, their etcd and apiservers on the standard ports. Two of them at once on one
loopback would collide. So every worker but the first moves into a network namespace of its own
before any fixture starts a server (`unshare(CLONE_NEWNET)`, root only); its 127.0.0.0/8 is a
fresh one, and the lab it runs cannot see the other worker's. The workers talk to the controller
over pipes, which a network namespace does not touch.

Scheduling (`--dist loadgroup`): each test module is one unit, so a module-scoped lab fixture
starts once; the heavy tiers are queued first and the many small unit modules fill the tail.
`python3 dev.py test` runs two workers when this host lets it take a network namespace (root),
else one process as before.
"""
from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import struct

import pytest

__all__ = ["isolate_worker", "order_and_group"]

CLONE_NEWNET = 0x40000000
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
# heaviest first, so that the long scenarios start early and short unit modules fill the tail
TIER_ORDER = ("e2e", "faults", "integration", "badinput", "deploy", "security", "contract", "unit")


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
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise pytest.UsageError(f"worker {worker}: unshare(CLONE_NEWNET) failed: {os.strerror(err)}; "
                                "run the suite without -n (labs of two workers would share one loopback)")
    _loopback_up()


def order_and_group(items: list[pytest.Item]) -> None:
    """Queue the heavy tiers first and make each module one xdist unit (unless a test names its
    own group)."""
    def tier(item: pytest.Item) -> int:
        parts = item.nodeid.split("/")
        name = parts[1] if len(parts) > 2 and parts[0] == "tests" else ""
        return TIER_ORDER.index(name) if name in TIER_ORDER else len(TIER_ORDER)

    items.sort(key=tier)  # stable: the order inside a tier is kept
    for item in items:
        if not any(True for _ in item.iter_markers("xdist_group")):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
