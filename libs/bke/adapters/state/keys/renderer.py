"""The renderer's keys (its per-node files are the `node_files` family); the upgrader asks it for the
VRRP password, sealed, on `bke.v1.vrrp-password.get` (bke.contracts.vrrp_password).

    bke:<c>:addon-manifests              hash    addon name -> rendered YAML     (renderer)
    bke:<c>:render:meta / vrrp-password  string                                  (renderer)
    bke:recent-renders                   list    the last renders and failures   (renderer)
"""
from __future__ import annotations

from .common import PREFIX, cluster_key

__all__ = ["addon_manifests_key", "recent_renders_key", "render_meta_key", "vrrp_password_key"]


def addon_manifests_key(cluster: str) -> str:
    """Hash addon name -> multi-document YAML: the renderer writes, the addons phase reads
    (bke.adapters.cluster_api.addons)."""
    return cluster_key(cluster, "addon-manifests")


def recent_renders_key() -> str:
    """The renderer's bounded list of its last renders and failures (its dashboard)."""
    return f"{PREFIX}:recent-renders"


def render_meta_key(cluster: str) -> str:
    return cluster_key(cluster, "render", "meta")


def vrrp_password_key(cluster: str) -> str:
    return cluster_key(cluster, "render", "vrrp-password")
