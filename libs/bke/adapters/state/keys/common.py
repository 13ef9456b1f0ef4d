"""The building blocks of every key name, and the one key the admin side writes for all.

    bke:epoch                            string  this deployment's state id      (admin: bke.adapters.state.state_init)
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["PREFIX", "OperationKeys", "all_keys_pattern", "cluster_key", "epoch_key"]

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


@dataclass(frozen=True)
class OperationKeys:
    """The keys of an operation its service resumes after a restart, as the three builders a family
    module names: `bke:<c>:<record>`, the cluster's current or last one (JSON);
    `bke:<c>:<record>:results`, command id -> the agent's answer to one of its commands; and
    `bke:<index>`, the clusters with such a record. A class rather than a function, so that the
    inventories, which take every public function of a family for a key builder, skip it."""

    record: str
    index: str

    def builders(self) -> tuple[Callable[[str], str], Callable[[str], str], Callable[[], str]]:
        def record_key(cluster: str) -> str:
            return cluster_key(cluster, self.record)

        def results_key(cluster: str) -> str:
            return cluster_key(cluster, self.record, "results")

        def index_key() -> str:
            return f"{PREFIX}:{self.index}"

        return record_key, results_key, index_key
