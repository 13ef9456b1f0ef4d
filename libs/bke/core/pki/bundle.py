"""A node's files with their content: what the dispatcher seals to that node's agent.

Why here: the directory store writes exactly these bytes under ``DIR/<hostname>/``, and the
dispatcher delivers exactly these bytes to the node, so both use :func:`render_files`.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .errors import PkiNotReady
from .instances import FileRef
from .kubeconfig import render_kubeconfig
from .manifest import Entry
from .material import Material

__all__ = ["NodeFile", "render_file", "render_files"]


@dataclass(frozen=True, slots=True)
class NodeFile:
    """One file for a node: absolute path, mode, bytes. ``secret`` files must travel sealed."""

    path: str
    mode: int
    content: bytes = field(repr=False)
    secret: bool

    def __repr__(self) -> str:
        return f"NodeFile({self.path!r}, mode={self.mode:o}, {len(self.content)} bytes, secret={self.secret})"


def render_file(ref: FileRef, materials: Mapping[str, Material], entries: Mapping[str, Entry],
                cluster: str) -> bytes:
    """The bytes of one node file; raises PkiNotReady if its material is not there."""
    m = materials.get(ref.instance)
    if m is None:
        raise PkiNotReady(f"{ref.instance} (for {ref.path}) has not been issued")
    if ref.part in ("cert", "pub"):
        return m.cert
    if m.key is None:
        raise PkiNotReady(f"{ref.instance} (for {ref.path}) has no private key in the store")
    if ref.part == "key":
        return m.key
    entry = entries[ref.instance]
    ca = materials.get(entry.ca or "")
    if ca is None or entry.server is None:
        raise PkiNotReady(f"{ref.instance}: CA {entry.ca} or server missing for {ref.path}")
    return render_kubeconfig(cluster=cluster, server=entry.server, ca_pem=ca.cert, cert_pem=m.cert,
                             key_pem=m.key, user=entry.user)


def render_files(refs: Sequence[FileRef], materials: Mapping[str, Material], entries: Mapping[str, Entry],
                 cluster: str) -> list[NodeFile]:
    return [NodeFile(r.path, r.mode, render_file(r, materials, entries, cluster), r.secret) for r in refs]
