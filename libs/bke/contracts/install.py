"""Install progress: phase and node transitions, the final outcome, and retry requests.

Published by the dispatcher on `bke.v1.install.<cluster>.<kind>`; `bke apply` / `bke lab
install` follow them for the live progress display.
"""
from __future__ import annotations

from .base import FailureKind, Message
from .channel import Channel
from .statuses import FinishedStatus, OperationStatus, PhaseStatus

__all__ = [
    "CHANNELS",
    "LEGACY_RETRY_REQUESTED",
    "PHASE_STATUSES",
    "InstallFinished",
    "NodeStepChanged",
    "PhaseChanged",
    "RetryInstall",
    "install_subject",
    "FailureKind",
    "RETRY_INSTALL",
]

PHASE_STATUSES = tuple(PhaseStatus)
RETRY_INSTALL = "bke.v1.cluster.retry"
# Commands are imperative: this one of earlier releases was named like an event. It stays accepted
# by the dispatcher, with a warning per message, until bke.v2 (bke.contracts.subjects.LEGACY_COMMANDS).
LEGACY_RETRY_REQUESTED = "bke.v1.cluster.retry-requested"  # now RETRY_INSTALL


def install_subject(cluster: str, kind: str) -> str:
    return f"bke.v1.install.{cluster}.{kind}"


class PhaseChanged(Message):
    request_id: str
    cluster: str
    phase: str
    status: PhaseStatus
    at: str
    message: str = ""
    done: int = 0  # nodes finished in this phase
    total: int = 0


class NodeStepChanged(Message):
    request_id: str
    cluster: str
    node: str
    phase: str
    status: OperationStatus
    at: str
    step: str | None = None  # the failing step's id
    stderr: str = ""


class InstallFinished(Message):
    request_id: str
    cluster: str
    status: FinishedStatus
    at: str
    phase: str | None = None  # the failing phase
    node: str | None = None  # one failing node (all are in the phase message)
    message: str = ""
    kind: FailureKind | None = None
    # False while no command has reached any node: the planner may then take a corrected spec
    # under the same name
    nodes_changed: bool = False
    plan_digest: str = ""  # the plan this install was of: a late event never marks a newer plan


class RetryInstall(Message):
    request_id: str
    cluster: str
    nodes: list[str] = []  # empty: every failed node of the failed phase


CHANNELS: tuple[Channel, ...] = (
    # Phase changes and the end of an install are kept. Per-node step changes (~30,000 at 5,000
    # nodes) are not: they are live progress for whoever listens (the CLI, a dashboard), the
    # dispatcher's Redis state holds every node's status, and storing them doubled the writes
    # JetStream makes during an install.
    Channel("bke.v1.install.{cluster}.phase", PhaseChanged, "event", "An install phase changed status.", ("dispatcher",), ("cli",)),
    Channel("bke.v1.install.{cluster}.node", NodeStepChanged, "event", "A node's command in a phase changed status (live only: not kept in a stream; Redis holds every node's status).", ("dispatcher",), (),
            external="live progress for whoever watches (`nats sub`, a dashboard); the CLI reads phases and status instead",
            stored=""),
    Channel("bke.v1.install.{cluster}.finished", InstallFinished, "event", "The install succeeded or failed (phase, node, reason, kind, whether any node changed).", ("dispatcher",), ("cli", "planner", "certs")),
    Channel(RETRY_INSTALL, RetryInstall, "command", "Retry the failed phase of an install (some or all failed nodes).", ("cli",), ("dispatcher",)),
    Channel(LEGACY_RETRY_REQUESTED, RetryInstall, "command", "Deprecated name of bke.v1.cluster.retry, accepted until bke.v2.", (), ("dispatcher",),
            external="sent only by CLIs and tooling of earlier releases"),
)
