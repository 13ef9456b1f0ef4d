"""Facts about the node that the agent reports on its heartbeat (advisory, never trusted for
anything but a pre-check: the upgrader's CgroupV2 check reads them through the dispatcher).

The cgroup version the same way the kubelet and runc tell it (runc libcontainer/cgroups
`IsCgroup2UnifiedMode`: a cgroup2 filesystem mounted at /sys/fs/cgroup): with
`/sys/fs/cgroup/cgroup.controllers` present the host is v2; a /sys/fs/cgroup without it is v1
(or hybrid, which the kubelet treats as v1). A lab node's tree has no /sys: not known (None),
unless a test lays one out under the node's root.
"""
from __future__ import annotations

from pathlib import Path
from typing import Literal

__all__ = ["cgroup_version"]


def cgroup_version(root: Path) -> Literal[1, 2] | None:
    base = root / "sys/fs/cgroup"
    try:
        if (base / "cgroup.controllers").is_file():
            return 2
        return 1 if base.is_dir() else None
    except OSError:
        return None
