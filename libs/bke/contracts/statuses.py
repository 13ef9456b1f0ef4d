"""The statuses operations, runs, phases and steps report: one enum per shape, in the contracts,
so that a status is never a bare string in code (a typo would be a new status nobody handles).

They are `StrEnum`s: a member is the string it stands for, so JSON on the bus and in Redis is the
same as it was with string literals, and `status == "Running"` still holds for old readers.
"""
from __future__ import annotations

from enum import StrEnum

__all__ = ["NodeUpgradeStatus", "OperationStatus", "RunStatus"]


class OperationStatus(StrEnum):
    """An operation as a whole: it runs until it ends one way or the other."""

    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class RunStatus(StrEnum):
    """A run's status: of the command in flight, or of the node's part when it has several."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    SKIPPED = "Skipped"  # nothing to run (a reset's snapshot of an etcd cluster with no member left)


class NodeUpgradeStatus(StrEnum):
    """How a node of a run of the upgrade record failed: its own step failed, or its agent put
    its old files back (a rollback: the node runs what it ran before)."""

    FAILED = "Failed"
    ROLLED_BACK = "RolledBack"
