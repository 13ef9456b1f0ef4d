"""Certificates: issued for a plan, sealed per agent, renewed on request."""
from __future__ import annotations

from pydantic import Field

from .base import Message

__all__ = ["CertRenewed", "CertsFailed", "CertsIssued", "RenewRequested", "CERTS_ISSUED", "CERTS_RENEWED", "CERTS_FAILED", "RENEW_REQUESTED"]

CERTS_ISSUED = "bke.v1.certs.issued"
CERTS_RENEWED = "bke.v1.certs.renewed"
CERTS_FAILED = "bke.v1.certs.failed"
RENEW_REQUESTED = "bke.v1.certs.renew-requested"


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


class CertsFailed(Message):
    request_id: str
    cluster: str
    reason: str


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
