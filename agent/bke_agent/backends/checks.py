"""Preflight checks of a node (`CheckHost`), one function per check name, like kubeadm's.

Why a table: the check names are the contract's vocabulary; the host and the lab run the
same table, except where the lab cannot check the real thing (its nodes share one kernel,
one clock and one swap), which it says in the check's output instead of pretending.
A failed check fails the step (retryable: swap can be turned off, a port freed).
"""
from __future__ import annotations

import errno
import os
import re
import shutil
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bke.contracts.agent_steps import CheckHost

from ..errors import StepError
from ..lab_netns import socket_in_netns
from .base import StepOutcome

__all__ = ["MACHINES", "MIN_FREE_BYTES", "NodeFacts", "run_checks"]

MIN_FREE_BYTES = 2 * 1024**3
KERNEL_MODULES = ("overlay", "br_netfilter")
EARLIEST_SANE_TIME = 1_704_067_200  # 2024-01-01: a clock before this breaks every certificate


@dataclass(frozen=True)
class NodeFacts:
    """Where a check looks: the node's root, its address, and whether it is a lab node."""

    root: Path
    ip: str  # ports are probed on this address ("0.0.0.0" on a host)
    lab: bool
    netns: str = ""  # a lab node in a network namespace: its ports are there (bke_agent.lab_netns)
    machine: str = field(default_factory=lambda: os.uname().machine)  # uname -m
    kernel: str = field(default_factory=lambda: os.uname().release)  # uname -r


# `uname -m` of each architecture BKE installs, by the Go name the spec and downloads use.
MACHINES: dict[str, tuple[str, ...]] = {"amd64": ("x86_64",), "arm64": ("aarch64", "arm64")}


def _os(f: NodeFacts, step: CheckHost) -> str:
    release = f.root / "etc/os-release"
    if f.lab:
        return "lab node (shares the machine's OS)"
    if not release.is_file():
        raise ValueError(f"{release} not found")
    fields = dict(line.split("=", 1) for line in release.read_text().splitlines() if "=" in line)
    return fields.get("PRETTY_NAME", fields.get("ID", "unknown")).strip('"')


def _swap_off(f: NodeFacts, step: CheckHost) -> str:
    if f.lab:
        return "lab node (swap is the machine's, not checked)"
    lines = Path("/proc/swaps").read_text().splitlines()[1:]
    if lines:
        raise ValueError(f"swap is on ({len(lines)} device(s)); the kubelet needs it off")
    return "no swap"


def _ports_free(f: NodeFacts, step: CheckHost) -> str:
    busy = []
    for port in step.ports:
        with socket_in_netns(f.netns) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((f.ip, port))
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE:
                    raise
                busy.append(port)
    if busy:
        raise ValueError(f"port(s) in use on {f.ip}: {', '.join(map(str, busy))}")
    return f"{len(step.ports)} port(s) free on {f.ip}"


def _disk(f: NodeFacts, step: CheckHost) -> str:
    free = shutil.disk_usage(f.root).free
    if free < MIN_FREE_BYTES:
        raise ValueError(f"{free // 1024**2} MiB free under {f.root}, need {MIN_FREE_BYTES // 1024**2} MiB")
    return f"{free // 1024**3} GiB free"


def _time(f: NodeFacts, step: CheckHost) -> str:
    now = time.time()
    if now < EARLIEST_SANE_TIME:
        day = time.strftime("%Y-%m-%d", time.gmtime(now))
        raise ValueError(f"the clock says {day}: certificates would not be valid yet")
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))


def _kernel_modules(f: NodeFacts, step: CheckHost) -> str:
    if f.lab:
        return "lab node (shares the machine's kernel)"
    missing = [m for m in KERNEL_MODULES if not os.path.isdir(f"/sys/module/{m}")]
    if missing:
        raise ValueError(f"kernel module(s) not loaded: {', '.join(missing)}")
    return ", ".join(KERNEL_MODULES)


def _cgroup(f: NodeFacts, step: CheckHost) -> str:
    """cgroup v2 when /sys/fs/cgroup/cgroup.controllers exists: only a cgroup2 filesystem mounted
    there has it (the kubelet asks the same question by the filesystem's type, libcontainer's
    IsCgroup2UnifiedMode); a hybrid host keeps cgroup2 under /sys/fs/cgroup/unified and is v1."""
    if f.lab:
        return "lab node (the machine's cgroups, not checked)"
    if (f.root / "sys/fs/cgroup/cgroup.controllers").is_file():
        return "cgroup v2 (unified hierarchy)"
    if step.require_cgroup_v2:
        raise ValueError(
            "cgroup v1: this Kubernetes version's kubelet refuses to start on it (failCgroupV1 defaults to true "
            "from 1.35); boot the host with cgroup v2 (systemd.unified_cgroup_hierarchy=1), or opt out with the "
            "kubelet extraArg fail-cgroupv1: \"false\""
        )
    return "cgroup v1 (accepted by this Kubernetes version's kubelet; deprecated upstream)"


def _arch(f: NodeFacts, step: CheckHost) -> str:
    if step.arch is None:
        raise ValueError("the step names no architecture to check")
    if f.lab:  # every lab node is this machine: a spec's arm64 node is only recorded
        return f"lab node (shares this machine, {f.machine}; the spec says {step.arch}: not checked)"
    if f.machine not in MACHINES[step.arch]:
        raise ValueError(f"this machine is {f.machine}, the spec says {step.arch} "
                         f"(it would fetch {step.arch} binaries that cannot run here)")
    return f"{f.machine} ({step.arch})"


def _kernel_version(f: NodeFacts, step: CheckHost) -> str:
    if step.min_kernel is None:
        raise ValueError("the step names no minimum kernel")
    want = tuple(int(x) for x in step.min_kernel.split("."))
    m = re.match(r"^(\d+)\.(\d+)", f.kernel)
    if f.lab:
        return f"lab node (shares this machine's kernel {f.kernel}; needs {step.min_kernel}: not checked)"
    if m is None:
        raise ValueError(f"cannot read the kernel version from {f.kernel!r}")
    if (int(m[1]), int(m[2])) < want:
        raise ValueError(f"kernel {f.kernel} is older than {step.min_kernel}, which kube-proxy's nftables mode needs")
    return f"{f.kernel} >= {step.min_kernel}"


CHECKS: dict[str, Callable[[NodeFacts, CheckHost], str]] = {
    "os": _os,
    "swap-off": _swap_off,
    "ports-free": _ports_free,
    "disk": _disk,
    "time": _time,
    "kernel-modules": _kernel_modules,
    "cgroup": _cgroup,
    "arch": _arch,
    "kernel-version": _kernel_version,
}


def run_checks(facts: NodeFacts, step: CheckHost) -> StepOutcome:
    """Run every named check; report all of them, fail if any failed."""
    ok, failed = [], []
    for name in step.checks:
        try:
            ok.append(f"ok {name}: {CHECKS[name](facts, step)}")
        except (OSError, ValueError) as exc:
            failed.append(f"FAILED {name}: {exc}")
    if failed:
        raise StepError("; ".join(failed), stdout="\n".join(ok) + "\n", stderr="\n".join(failed) + "\n")
    return StepOutcome(stdout="\n".join(ok) + "\n")
