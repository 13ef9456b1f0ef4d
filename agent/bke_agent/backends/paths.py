"""Where a node path may be written, and where it lands on the local file system.

Why one policy for both backends: the host backend writes under "/" but only inside an
allow-list of directories; the lab backend writes anywhere in the node's tree but never out
of it. Both are "a root plus allowed prefixes", so both get the same checks:

1. the path is absolute and has no `..` component (refused outright, not normalised away);
2. it falls under an allowed prefix (a prefix may end in `*`: `/var/lib/etcd*` covers
   `/var/lib/etcd-events`) and under no denied one (the agent's own state);
3. after following symlinks, its parent directory is still inside the real directory of
   that allowed prefix under the root, so a symlink cannot carry a write out of it.
   The last component itself is never followed: writes replace it, removals unlink it.

Together with signed commands (verify.py) and the program allow-list (programs.py) this bounds
what even a compromised dispatcher can do to a node: our files, our units, our binaries. Which
kind of command may write which of them (a unit, a binary, a static pod manifest, a script) is
bke.core.host_actions' table, checked on the whole command before it runs (agent loop).
"""
from __future__ import annotations

import fnmatch
import os
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from ..errors import PathRefused

__all__ = ["HOST_WRITE_DIRS", "HOST_WRITE_TABLE", "PathPolicy", "read_path"]

# What the host backend may write, each with the work that needs it (what the renderer's
# layout, bke.core.render.layout, and the dispatcher's steps write; nothing else). A pattern that
# names a file (no directory below it) allows that file only.
HOST_WRITE_TABLE: tuple[tuple[str, str], ...] = (
    ("/etc/kubernetes", "kubeadm's layout: pki/, the kubeconfigs, static pod manifests/"),
    ("/var/lib/kubelet", "the kubelet's config.yaml"),
    ("/etc/containerd", "containerd's config.toml and registry hosts (certs.d/)"),
    ("/etc/systemd/system/kubelet.service", "our kubelet unit (only that unit)"),
    ("/etc/systemd/system/containerd.service", "our containerd unit (only that unit)"),
    ("/usr/local/bin/containerd", "the containerd binary, where its release tarball puts it (only that binary)"),
    ("/usr/local/bin/containerd-shim-runc-v2", "the runc shim, from containerd's release tarball (only that binary)"),
    ("/usr/local/sbin/runc", "runc, where its release (and containerd's getting-started guide) puts it"),
    ("/usr/local/bin/crictl", "crictl, where cri-tools' release tarball is unpacked (registered nodes)"),
    ("/opt/cni/bin", "the standard CNI plugins, where kubelet and calico look for them (registered nodes)"),
    ("/etc/crictl.yaml", "crictl's configuration: containerd's socket (only that file)"),
    ("/etc/modules-load.d/bke.conf", "the kernel modules loaded at boot (bke.core.node_kernel; only our file)"),
    ("/etc/modules-load.d/bke-old-kernel.conf", "modules only a kernel before 4.19 names (bke.core.node_kernel; only our file)"),
    ("/etc/sysctl.d/99-bke.conf", "the kernel parameters applied at boot (bke.core.node_kernel; only our file)"),
    ("/usr/bin/kubelet", "the kubelet binary, where the distribution packages put it"),
    ("/usr/bin/kubectl", "the kubectl binary, where the distribution packages put it"),
    ("/etc/haproxy", "the control-plane load balancer's haproxy.cfg"),
    ("/etc/keepalived", "keepalived.conf and its apiserver check script"),
)
HOST_WRITE_DIRS: tuple[str, ...] = tuple(p for p, _ in HOST_WRITE_TABLE)


def _within(child: str, parent: str) -> bool:
    return child == parent or child.startswith(parent.rstrip("/") + "/")


class PathPolicy:
    def __init__(self, root: Path, allowed: Sequence[str] = ("/",), denied: Sequence[str] = ()) -> None:
        self.root = Path(os.path.realpath(root))
        self.allowed = tuple(PurePosixPath(a) for a in allowed)
        self.denied = tuple(PurePosixPath(d) for d in denied)

    def _anchor(self, path: PurePosixPath) -> PurePosixPath | None:
        """The concrete allowed directory `path` lies in (the prefix with its `*` filled in)."""
        for prefix in self.allowed:
            n = len(prefix.parts)
            if len(path.parts) >= n and all(fnmatch.fnmatchcase(p, q) for p, q in zip(path.parts, prefix.parts)):
                return PurePosixPath(*path.parts[:n])
        return None

    def local(self, node_path: str) -> Path:
        """The local file for `node_path`, or PathRefused saying why not."""
        if "\x00" in node_path or not node_path.startswith("/"):
            raise PathRefused(f"{node_path!r}: not an absolute path")
        logical = PurePosixPath(node_path)
        if ".." in logical.parts:
            raise PathRefused(f"{node_path}: '..' is not allowed in a path")
        if logical == PurePosixPath("/"):
            raise PathRefused("/: not a file path")
        anchor = self._anchor(logical)
        if anchor is None:
            allowed = ", ".join(str(a) for a in self.allowed)
            raise PathRefused(f"{node_path}: outside the directories this agent may write ({allowed})")
        for d in self.denied:
            if _within(str(logical), str(d)):
                raise PathRefused(f"{node_path}: inside {d}, which belongs to the agent itself")
        target = self.root / logical.relative_to("/")
        if anchor == logical:  # the pattern names the file itself (`/usr/bin/kube*`)
            anchor = anchor.parent
        anchor_real = os.path.realpath(self.root / anchor.relative_to("/"))
        parent_real = os.path.realpath(target.parent)
        if not _within(anchor_real, str(self.root)) or not _within(parent_real, anchor_real):
            raise PathRefused(f"{node_path}: a symlink leads out of {anchor}")
        resolved = Path(parent_real) / target.name
        for d in self.denied:
            if _within(str(resolved), os.path.realpath(self.root / d.relative_to("/"))):
                raise PathRefused(f"{node_path}: a symlink leads into {d}, which belongs to the agent itself")
        return resolved

    def node_path(self, local: Path) -> str:
        """The inverse of `local` for a path inside the root (for messages)."""
        return "/" + str(Path(local).relative_to(self.root))


def read_path(root: Path, node_path: str) -> Path:
    """A node path to read (TLS files of a health check): under `root`, no `..`."""
    p = PurePosixPath(node_path)
    if not p.is_absolute() or ".." in p.parts:
        raise PathRefused(f"{node_path!r}: not an absolute path without '..'")
    return root / p.relative_to("/")
