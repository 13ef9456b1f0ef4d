"""Install progress: phase and node transitions, the final outcome, and retry requests.

Published by the dispatcher on `bke.v1.install.<cluster>.<kind>`; `bke apply` / `bke lab
install` follow them for the live progress display.
"""
from __future__ import annotations

from .base import FailureKind, Message
from .statuses import FinishedStatus, OperationStatus, PhaseStatus

__all__ = [
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
