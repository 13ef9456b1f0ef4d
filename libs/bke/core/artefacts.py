"""Every file BKE fetches from the `httpRepo`, as one data table: the node-env phase, the
dispatcher's checksum source and `bke bundle build` all read it, so a file a node needs is a
file the bundle holds.

The `httpRepo` tree is flat per file (what a node fetches is one binary, never an archive):

    <httpRepo>/<project>/<version>/linux/<arch>/<file>          a binary, and <file>.sha256
    <httpRepo>/<project>/<version>/<file>                       an arch-independent manifest

`bke bundle build` unpacks upstream's archives (containerd's and crictl's tarballs, the CNI
plugins' tgz) into this layout after checking each archive against upstream's published
checksum, and writes a `.sha256` beside every file, as dl.k8s.io does for kubelet.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from bke.core.pythons import STANDALONE
from bke.core.spec.models import Cluster
from bke.core.versions import KUBERNETES, RUNC, parse_version

__all__ = [
    "file_sha256",
    "tree_sha256",
    "ARCHES",
    "Artefact",
    "CNI_PLUGINS",
    "agent_artefacts",
    "cluster_artefacts",
    "node_artefacts",
]

# Node architectures BKE installs (Go's names, as upstream's download paths spell them).
ARCHES: tuple[str, ...] = ("amd64", "arm64")
# The standard CNI plugins a node gets: what kubelet's own loopback and calico's
# install-cni expect beside calico's binaries (calico installs `calico` and `calico-ipam` itself).
CNI_PLUGINS: tuple[str, ...] = ("loopback", "bridge", "host-local", "portmap", "bandwidth", "tuning")


@dataclass(frozen=True)
class Artefact:
    project: str  # the tree's top folder: kubernetes, containerd, runc, cni-plugins, crictl, calico
    version: str  # without a leading "v"
    file: str  # the file's name in the tree
    arch: str | None  # None: arch-independent (manifests)
    dest: str | None  # where a node keeps it; None: not placed on nodes (the dispatcher reads it)
    mode: int = 0o755

    @property
    def path(self) -> str:
        """The file's path under the httpRepo root."""
        if self.arch is None:
            return f"{self.project}/{self.version}/{self.file}"
        return f"{self.project}/{self.version}/linux/{self.arch}/{self.file}"

    def url(self, http_repo: str) -> str:
        return f"{http_repo.rstrip('/')}/{self.path}"

    @property
    def key(self) -> str:
        """A name unique among one node's artefacts (the step id and the checksum key)."""
        return f"{self.project}/{self.file}"


def _v(text: str) -> str:
    return str(parse_version(text))


def node_artefacts(c: Cluster, arch: str, *, registers: bool) -> list[Artefact]:
    """What one node fetches. Every node runs containerd (runc and its shim with it) and the
    kubelet, which runs the static pods; only nodes whose kubelet registers with the apiserver
    get pod networking (the CNI plugins), crictl and kubectl."""
    k8s, ctd = _v(c.kubernetes_version), _v(c.containerd_version)
    row = KUBERNETES[parse_version(k8s).minor_key]
    out = [
        Artefact("containerd", ctd, "containerd", arch, "/usr/local/bin/containerd"),
        Artefact("containerd", ctd, "containerd-shim-runc-v2", arch, "/usr/local/bin/containerd-shim-runc-v2"),
        Artefact("runc", RUNC[parse_version(ctd).minor_key], "runc", arch, "/usr/local/sbin/runc"),
        Artefact("kubernetes", k8s, "kubelet", arch, "/usr/bin/kubelet"),
    ]
    if registers:
        out += [
            Artefact("kubernetes", k8s, "kubectl", arch, "/usr/bin/kubectl"),
            Artefact("crictl", row.crictl, "crictl", arch, "/usr/local/bin/crictl"),
            *(Artefact("cni-plugins", row.cni_plugins, p, arch, f"/opt/cni/bin/{p}") for p in CNI_PLUGINS),
        ]
    return out


def cluster_artefacts(c: Cluster) -> list[Artefact]:
    """What the dispatcher itself fetches for a cluster: the CNI's manifest."""
    if c.cni != "calico":
        return []
    row = KUBERNETES[parse_version(c.kubernetes_version).minor_key]
    return [Artefact("calico", row.calico, "calico.yaml", None, None, 0o644)]


def agent_artefacts(arch: str) -> list[Artefact]:
    """What `bke agent bootstrap` may put on a node before the agent runs: the relocatable CPython
    (bke.core.pythons.STANDALONE) for nodes whose python3 cannot run the agent. Kept as upstream's
    archive (the bootstrap unpacks it under bke.adapters.ssh.layout.PYTHON_PREFIX), so dest is None."""
    return [Artefact("python", STANDALONE.version, "python.tar.gz", arch, None, 0o644)]


_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def tree_sha256(text: str, where: str) -> str:
    """The digest a tree's `<file>.sha256` records: its first word, lower-cased (a bare digest as
    dl.k8s.io and `bke bundle build` write it, or `sha256sum` output). ValueError naming `where`
    when that is not a sha256 hex digest. The dispatcher, the bootstrap and the bundle read the
    tree's checksums through this one function."""
    words = text.split()
    digest = words[0].lower() if words else ""
    if not _SHA256.match(digest):
        raise ValueError(f"{where}: not a sha256 digest ({text[:80]!r})")
    return digest


def file_sha256(path: Path) -> str:
    """A local file's sha256, read in 1 MiB chunks (bundle files are up to tens of MB)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
