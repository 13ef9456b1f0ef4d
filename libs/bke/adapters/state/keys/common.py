"""The building blocks of every key name, and the one key the admin side writes for all.

    bke:epoch                            string  this deployment's state id      (admin: bke.adapters.state.state_init)
"""
from __future__ import annotations

__all__ = ["PREFIX", "all_keys_pattern", "cluster_key", "epoch_key"]

PREFIX = "bke"


def cluster_key(cluster: str, *parts: str) -> str:
    """The building block of the per-cluster names of the family modules; call those, not this."""
    return ":".join((PREFIX, cluster, *parts))


def epoch_key() -> str:
    """A random id written once per deployment's state by the admin side (`bke state init`,
    bke.adapters.state.state_init; services only read it, bke.adapters.state.epoch): if it changes or vanishes
    under a running service, the state was lost or replaced."""
    return f"{PREFIX}:epoch"


def all_keys_pattern() -> str:
    """A SCAN pattern that matches every key of every family (bke.adapters.state.backup exports exactly these)."""
    return f"{PREFIX}:*"
