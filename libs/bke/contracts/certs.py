"""Certificates: issued for a plan, sealed per agent, renewed on request."""
from __future__ import annotations

from pydantic import Field

from .base import FailureKind, Message

__all__ = [
    "CertRenewed",
    "CertsFailed",
    "CertsIssued",
    "CertsSealed",
    "IssueRequested",
    "RenewRequested",
    "CERTS_ISSUED",
    "CERTS_RENEWED",
    "CERTS_FAILED",
    "CERTS_SEALED",
    "ISSUE_REQUESTED",
    "RENEW_REQUESTED",
]

CERTS_ISSUED = "bke.v1.certs.issued"
CERTS_RENEWED = "bke.v1.certs.renewed"
CERTS_FAILED = "bke.v1.certs.failed"
RENEW_REQUESTED = "bke.v1.certs.renew-requested"
CERTS_SEALED = "bke.v1.certs.sealed"
ISSUE_REQUESTED = "bke.v1.certs.issue-requested"


class CertsIssued(Message):
    """References only: names and counts, never key material. Node files are in Redis
    (`bke:<cluster>:pki:*`, keys encrypted at rest) and, per node, sealed to its agent."""

    request_id: str
    cluster: str
    issued: list[str]
    reissued: list[str]
    reused: int
    changed_nodes: int
    warnings: list[str] = []
    plan_digest: str = ""  # the plan this PKI was ensured for: a stale event is ignored


class CertsFailed(Message):
    request_id: str
    cluster: str
    reason: str
    kind: FailureKind = "operational"
    node: str | None = None  # set when one node's bundle could not be sealed (e.g. its agent key)
    plan_digest: str = ""


class CertsSealed(Message):
    """Event: these nodes' bundles are sealed to their agents and stored (names only). The
    dispatcher counts sealed nodes from these events, never from the certs service's storage."""

    cluster: str
    nodes: list[str]


class IssueRequested(Message):
    """Command: ensure the cluster's PKI and seal every registered agent's bundle again (sent by
    the dispatcher on `bke retry` after a certificates failure). Answered like a plan."""

    request_id: str
    cluster: str


class RenewRequested(Message):
    request_id: str
    cluster: str
    within_days: float = Field(30.0, gt=0, le=3650)


class CertRenewed(Message):
    request_id: str
    cluster: str
    name: str
    instance: str
    nodes: list[str]
    serial: str
    not_after: str
