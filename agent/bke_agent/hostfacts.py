"""Facts about the node that the agent reports on its heartbeat (advisory, never trusted for
anything but a pre-check: the upgrader's CgroupV2 check reads them through the dispatcher).

The cgroup version the same way the kubelet and runc tell it (runc libcontainer/cgroups
`IsCgroup2UnifiedMode`: a cgroup2 filesystem mounted at /sys/fs/cgroup): with
`/sys/fs/cgroup/cgroup.controllers` present the host is v2; a /sys/fs/cgroup without it is v1
(or hybrid, which the kubelet treats as v1). A lab node's tree has no /sys: not known (None),
unless a test lays one out under the node's root.

The agent's runtime (`agent_runtime`): its version, its interpreter's major.minor and
implementation, the machine, and the C library the interpreter links with its version, which
is what pip's platform tags are made of (pypa/packaging `tags.py`, `_manylinux.py`,
`_musllinux.py`): glibc's version as `platform.libc_ver()` reads it from the interpreter
(packaging asks confstr("CS_GNU_LIBC_VERSION") first, the same library); musl's from the
dynamic loader, which prints "Version X.Y.Z" when run with no argument (how `_musllinux.py`
reads it). Computed once: none of it changes while the agent runs. It also says which form of
command binding the agent checks (bke.core.secrets.binding): the signers send an agent bound commands
unless its runtime says it reads none.
"""
from __future__ import annotations

import functools
import platform
import re
import subprocess
import sys
from pathlib import Path
from typing import Literal

from bke.contracts.agent import AgentRuntime
from bke.core.secrets.binding import AGENT_COMMAND_FORM

__all__ = ["agent_runtime", "cgroup_version", "musl_version"]


def cgroup_version(root: Path) -> Literal[1, 2] | None:
    base = root / "sys/fs/cgroup"
    try:
        if (base / "cgroup.controllers").is_file():
            return 2
        return 1 if base.is_dir() else None
    except OSError:
        return None


def musl_version(loader_output: str) -> str:
    """major.minor from a musl loader's output ("musl libc (x86_64)\\nVersion 1.2.4\\n..."), "" if none."""
    m = re.search(r"^Version ([0-9]+)\.([0-9]+)", loader_output, re.MULTILINE)
    return f"{m[1]}.{m[2]}" if m else ""


def _libc() -> tuple[Literal["glibc", "musl", ""], str]:
    name, version = platform.libc_ver()
    if name == "glibc":
        m = re.match(r"^([0-9]+)\.([0-9]+)", version)
        return ("glibc", f"{m[1]}.{m[2]}") if m else ("", "")
    for loader in sorted(Path("/lib").glob("ld-musl-*.so.1")):
        try:
            out = subprocess.run([str(loader)], capture_output=True, text=True, timeout=5, check=False)
        except (OSError, subprocess.SubprocessError):
            continue
        if v := musl_version(out.stderr):
            return "musl", v
    return "", ""


@functools.lru_cache(maxsize=4)
def agent_runtime(version: str) -> AgentRuntime:
    libc, libc_version = _libc()
    return AgentRuntime(agent_version=version, python=f"{sys.version_info.major}.{sys.version_info.minor}",
                        implementation=sys.implementation.name, machine=platform.machine(), libc=libc,
                        libc_version=libc_version, command_binding=AGENT_COMMAND_FORM)
