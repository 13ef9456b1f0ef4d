"""The statuses operations, runs, phases, nodes and steps report: one enum per set of values, in
the contracts, so that a status is never a bare string in code (a typo would be a new status
nobody handles). A message field takes exactly the set its enum has: a field that never held
"Skipped" has an enum without it, so a message that says so is still refused.

They are `StrEnum`s: a member is the string it stands for, so JSON on the bus and in Redis is the
same as it was with string literals, and `status == "Running"` still holds for old readers.
tests/unit/layers/test_status_literals.py fails on a status word written as a string elsewhere.

The inputs an install phase needs (`PhaseNeed`) are here too: a closed set the phase table
declares and the dispatcher's decisions test, as they test statuses.
"""
from __future__ import annotations

from enum import StrEnum

__all__ = ["AddonStatus", "CommandStatus", "FinishedStatus", "HealthStatus", "InputStatus", "InstallStatus", "JoinInputStatus",
           "MarkStatus", "NodeOutcomeStatus", "NodeProgress", "NodeStatus", "OperationStatus", "PhaseNeed", "PhaseStatus", "RunStatus", "StepResultStatus",
           "UpgradeNodeStatus"]


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


class PhaseStatus(StrEnum):
    """An install phase's status (the phase table's rows). The same words as a run's, kept apart:
    a phase is the dispatcher's table row, a run one node's command."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    SKIPPED = "Skipped"  # its `run_if` said the plan has nothing for it

    @property
    def finished(self) -> bool:
        """Done with: the next phase may start (a failed phase is over too, but stops the install)."""
        return self in (PhaseStatus.SUCCEEDED, PhaseStatus.SKIPPED)


class NodeStatus(StrEnum):
    """A node's part in an install, rotation, reset, join or removal (and a restore's stage): it
    waits, runs, and ends one way or the other; it is never skipped."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


# An install as a whole takes a node's set: Pending until its first phase runs, never skipped.
InstallStatus = NodeStatus


class UpgradeNodeStatus(StrEnum):
    """A node of an upgrade: as a node's status, and rolled back (its old files are back)."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    ROLLED_BACK = "RolledBack"


class FinishedStatus(StrEnum):
    """How something that is over ended: an install, a join or removal, an agent's command."""

    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class StepResultStatus(StrEnum):
    """An agent step's result: done, failed, or nothing to do (the node already was as asked)."""

    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    SKIPPED = "Skipped"


class CommandStatus(StrEnum):
    """An install command as the dispatcher records it (`bke:<c>:cmd:<slug>`): sent and awaited,
    answered, or put back by a retry to be sent again under a new generation."""

    SENT = "Sent"
    RETRY = "Retry"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class InputStatus(StrEnum):
    """What the renderer or the certs service said about an install's input (its files, its
    certificates, a node's sealed bundle), as the dispatcher records it."""

    READY = "Ready"  # rendered / issued for the install's plan
    FAILED = "Failed"  # the service said why it could not
    REQUESTED = "Requested"  # asked again by a retry; its answer is awaited


class JoinInputStatus(StrEnum):
    """A join's input (its rendered files, its certificates) as its record keeps it: not
    answered yet, then what the service answered (`InputStatus`: Ready or Failed)."""

    PENDING = "Pending"
    READY = "Ready"
    FAILED = "Failed"


class HealthStatus(StrEnum):
    """A node's latest health answer."""

    HEALTHY = "Healthy"
    UNHEALTHY = "Unhealthy"


class AddonStatus(StrEnum):
    """An addon as the addons phase records it (`bke status` lists them): validated and not
    applied (the lab, which has no apiserver), applied, or applied and its workload ready."""

    VALIDATED = "Validated"
    APPLIED = "Applied"
    READY = "Ready"


class MarkStatus(StrEnum):
    """A node's labels and taints as the node-labels phase records them: applied to its Node
    object, or recorded only (the lab, which has no apiserver)."""

    APPLIED = "Applied"
    RECORDED = "Recorded"


class PhaseNeed(StrEnum):
    """What an install phase needs before it sends a command (its `needs` in the phase table)."""

    AGENTS = "agents"  # every target's agent registered (the phase only waits for them)
    RENDER = "render"  # the renderer's files for the install's plan
    CERTS = "certs"  # the cluster's certificates, and every node's bundle sealed to its agent
    CHECKSUMS = "checksums"  # the binaries' checksums of the httpRepo
    AGENT_KEYS = "agent-keys"  # each target's agent sealing key (files sealed to it, not the PKI)


class NodeOutcomeStatus(StrEnum):
    """How a node of a run of the upgrade record failed: its own step failed, or its agent put
    its old files back (a rollback: the node runs what it ran before)."""

    FAILED = "Failed"
    ROLLED_BACK = "RolledBack"


class NodeProgress(StrEnum):
    """Where a node stands in an upgrade, as the upgrader's metrics and pages count nodes (the
    `state` label of bke_upgrade_nodes): its steps ahead, under way or done, or how it failed."""

    PENDING = "Pending"
    UPGRADING = "Upgrading"
    UPGRADED = "Upgraded"
    FAILED = "Failed"
    ROLLED_BACK = "RolledBack"
    LEFT_OUT = "LeftOut"
