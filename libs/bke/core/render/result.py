"""What rendering produces: per node, files at absolute node paths; per cluster, addon manifests.

Values only (frozen dataclasses): they cross into the CLI (written under DIR/<host>/), the Redis
store and the dispatcher. The digest covers every byte, mode and secret flag, so "same plan, same
digest" is how the service knows a re-render changed nothing.
"""
from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass, field
from typing import Any

__all__ = ["NodeDiff", "NodeFiles", "RenderedCluster", "RenderedFile", "diff_rendered"]


@dataclass(frozen=True, slots=True)
class RenderedFile:
    path: str  # absolute on the node, or the addon file name for cluster-level files
    mode: int
    content: bytes
    secret: bool = False  # holds a credential (the VRRP password): never logged, stored sealed by consumers

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.content).hexdigest()

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "mode": self.mode, "secret": self.secret,
                "content": base64.b64encode(self.content).decode()}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RenderedFile:
        return cls(d["path"], int(d["mode"]), base64.b64decode(d["content"]), bool(d["secret"]))


@dataclass(frozen=True, slots=True)
class NodeFiles:
    hostname: str
    files: tuple[RenderedFile, ...]

    def file(self, path: str) -> RenderedFile | None:
        return next((f for f in self.files if f.path == path), None)

    @property
    def digest(self) -> str:
        return _digest(self.files)


def _digest(files: tuple[RenderedFile, ...]) -> str:
    h = hashlib.sha256()
    for f in sorted(files, key=lambda f: f.path):
        h.update(f"{f.path}\0{f.mode:o}\0{int(f.secret)}\0{len(f.content)}\0".encode())
        h.update(f.content)
    return h.hexdigest()


@dataclass(frozen=True)
class RenderedCluster:
    cluster: str
    kubernetes_version: str
    etcd_version: str
    containerd_version: str
    tier: str
    template_sets: tuple[str, ...]
    nodes: tuple[NodeFiles, ...]
    addons: tuple[RenderedFile, ...]
    warnings: tuple[str, ...] = ()
    digest: str = field(default="")

    def __post_init__(self) -> None:
        if not self.digest:
            h = hashlib.sha256()
            for n in sorted(self.nodes, key=lambda n: n.hostname):
                h.update(f"{n.hostname}\0{n.digest}\0".encode())
            h.update(f"addons\0{_digest(self.addons)}".encode())
            object.__setattr__(self, "digest", h.hexdigest())

    def node(self, hostname: str) -> NodeFiles:
        for n in self.nodes:
            if n.hostname == hostname:
                return n
        raise KeyError(hostname)

    @property
    def file_count(self) -> int:
        return sum(len(n.files) for n in self.nodes) + len(self.addons)

    def meta_json(self) -> dict[str, Any]:
        return {"cluster": self.cluster, "kubernetesVersion": self.kubernetes_version, "etcdVersion": self.etcd_version,
                "containerdVersion": self.containerd_version, "tier": self.tier, "templateSets": list(self.template_sets),
                "warnings": list(self.warnings), "digest": self.digest, "nodes": [n.hostname for n in self.nodes]}


@dataclass(frozen=True)
class NodeDiff:
    hostname: str  # "" for the cluster-level addon files
    added: tuple[str, ...]
    removed: tuple[str, ...]
    changed: tuple[str, ...]

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.changed)


def _diff_files(host: str, old: tuple[RenderedFile, ...], new: tuple[RenderedFile, ...]) -> NodeDiff:
    a = {f.path: f for f in old}
    b = {f.path: f for f in new}
    changed = tuple(sorted(p for p in a.keys() & b.keys() if (a[p].content, a[p].mode, a[p].secret) != (b[p].content, b[p].mode, b[p].secret)))
    return NodeDiff(host, tuple(sorted(b.keys() - a.keys())), tuple(sorted(a.keys() - b.keys())), changed)


def diff_rendered(old: RenderedCluster, new: RenderedCluster) -> list[NodeDiff]:
    """Per node (old and new node sets united, sorted), which files were added, removed or changed;
    the addon files come last under hostname ""."""
    olds = {n.hostname: n.files for n in old.nodes}
    news = {n.hostname: n.files for n in new.nodes}
    out = [_diff_files(h, olds.get(h, ()), news.get(h, ())) for h in sorted(olds.keys() | news.keys())]
    out.append(_diff_files("", old.addons, new.addons))
    return out
