"""Per-node file sets: certs writes its sealed bundles (`certs`), the renderer its rendered files
(`render`); the dispatcher and the upgrader read them through bke.adapters.state.nodefiles.

    bke:<c>:files:<source>[:digest]      hash    per-node file sets (render, certs)
    bke:<c>:files:render:signatures      hash    node -> the renderer's signature of its files (renderer)
"""
from __future__ import annotations

from .common import cluster_key

__all__ = ["node_files_digest_key", "node_files_key", "node_files_signatures_key"]


def node_files_key(cluster: str, source: str) -> str:
    """`source`: "render" or "certs"."""
    return cluster_key(cluster, "files", source)


def node_files_digest_key(cluster: str, source: str) -> str:
    """Set once a source's file set is complete."""
    return node_files_key(cluster, source) + ":digest"


def node_files_signatures_key(cluster: str, source: str) -> str:
    """Node -> its writer's signature of its files (bke.core.secrets.record_signing)."""
    return node_files_key(cluster, source) + ":signatures"
