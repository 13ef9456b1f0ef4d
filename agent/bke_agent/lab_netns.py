"""A lab node whose control plane lives in a network namespace (bke.lab.netns): how its agent,
which stays in the root namespace with its NATS connection, reaches into it.

- a pod's process is started through `nsenter --net=/run/netns/<ns>`, which joins the namespace
  and then execs the process (its PID is the process's own: stopping it by PID still works);
- a socket the agent itself listens on for the node (the kubelet's /healthz) or binds to check a
  port is created inside the namespace: a thread joins it with setns(2) and makes the socket,
  which stays in that namespace whichever thread uses it. Python 3.11 has no os.setns, hence libc.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import socket
import threading
from collections.abc import Mapping, Sequence

__all__ = ["NETNS_ENV", "in_netns", "lab_netns", "socket_in_netns"]

NETNS_ENV = "BKE_LAB_NETNS"  # set by the lab supervisor (bke.lab.supervisor) for a namespaced node
CLONE_NEWNET = 0x40000000  # <sched.h>


def lab_netns(env: Mapping[str, str] | None = None) -> str:
    """This node's namespace ("" when its processes share the root namespace)."""
    return (os.environ if env is None else env).get(NETNS_ENV, "")


def in_netns(netns: str, argv: Sequence[str]) -> list[str]:
    """`argv` run inside `netns` (unchanged when it is "")."""
    return ["nsenter", f"--net=/run/netns/{netns}", "--", *argv] if netns else list(argv)


def socket_in_netns(netns: str, family: int = socket.AF_INET, kind: int = socket.SOCK_STREAM) -> socket.socket:
    """A new socket in `netns` ("": this process's own namespace). OSError when it cannot join."""
    if not netns:
        return socket.socket(family, kind)
    made: list[socket.socket] = []
    failed: list[OSError] = []

    def join_and_make() -> None:  # this thread ends in the namespace; the process does not
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
            fd = os.open(f"/run/netns/{netns}", os.O_RDONLY)
            try:
                if libc.setns(fd, CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"setns({netns}): {os.strerror(err)}")
            finally:
                os.close(fd)
            made.append(socket.socket(family, kind))
        except OSError as exc:
            failed.append(exc)

    worker = threading.Thread(target=join_and_make, name=f"netns:{netns}", daemon=True)
    worker.start()
    worker.join()
    if failed:
        raise failed[0]
    return made[0]
