"""What a drain may evict beyond kubectl's defaults, as an upgrade, an apply or a removal asks.

The rules themselves are bke.core.drain's (`kubectl drain --ignore-daemonsets`'s); these two
switches are kubectl's `--force` and `--delete-emptydir-data`. A request that names none sends no
`drain` field at all (bke.contracts.base.without_none), so a service of the previous release
still reads it.
"""
from __future__ import annotations

from pydantic import Field

from .base import Message

__all__ = ["DrainOptions"]


class DrainOptions(Message):
    force: bool = False  # evict pods no controller owns (nothing brings them back)
    # evict pods with emptyDir volumes (their data is lost); kubectl's spelling on the wire
    delete_emptydir_data: bool = Field(False, alias="deleteEmptyDirData")
