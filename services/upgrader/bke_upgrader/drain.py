"""Cordon, drain and uncordon, for the upgrade's drain steps: `bke.adapters.drain` (shared with the
dispatcher's removal of workers), with the lab's record in the upgrade's own key."""
from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from redis.asyncio import Redis

from bke.adapters.drain import Drainer, KubernetesDrainer
from bke.lab.standins.drain import LabDrainer as _LabDrainer
from bke.adapters.state.keys.common import cluster_key

__all__ = ["Drainer", "KubernetesDrainer", "LabDrainer", "drain_key"]


def drain_key(cluster: str) -> str:
    return cluster_key(cluster, "upgrade", "drain")


class LabDrainer(_LabDrainer):
    """Recorded in `bke:<c>:upgrade:drain` (hostname -> {cordoned, drained, uncordoned})."""

    def __init__(self, redis: Redis, now: Callable[[], datetime]):
        super().__init__(redis, now, drain_key)
