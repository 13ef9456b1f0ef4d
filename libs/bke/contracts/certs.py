"""Certificates: issued for a plan, sealed per agent, renewed on request (or on their own)."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from .base import FailureKind, Message, without_none
from .channel import Channel

__all__ = [
    "CHANNELS",
    "CERTS_FAILED",
    "CERTS_ISSUED",
    "CERTS_RENEWED",
    "CERTS_SEALED",
    "ISSUE_CERTS",
    "RENEW_CERTS",
    "CertsFailed",
    "CertsIssued",
    "CertsRenewed",
    "CertsSealed",
    "IssueCerts",
    "RenewOrigin",
    "RenewCerts",
    "RenewedCertificate",
]

CERTS_ISSUED = "bke.v1.certs.issued"
CERTS_RENEWED = "bke.v1.certs.renewed"
CERTS_FAILED = "bke.v1.certs.failed"
RENEW_CERTS = "bke.v1.certs.renew"
CERTS_SEALED = "bke.v1.certs.sealed"
ISSUE_CERTS = "bke.v1.certs.issue"

# "upgrade": asked by the upgrader, which delivers the renewed files itself in its node steps
# (no rotation follows, and the renewal does not hold the cluster: the upgrade does)
RenewOrigin = Literal["cli", "auto", "upgrade"]


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
    """The PKI could not be ensured for a plan, or a renewal was refused or failed
    (`request_id` is then the renewal's)."""

    request_id: str
    cluster: str
    reason: str
    kind: FailureKind = "operational"
    node: str | None = None  # set when one node's bundle could not be sealed (e.g. its agent key)
    plan_digest: str = ""
    # what failed: the cluster's install (it fails with this reason) or a renewal (its follower)
    operation: Literal["install", "renewal"] = "install"


class CertsSealed(Message):
    """Event: these nodes' bundles are sealed to their agents and stored (names only). The
    dispatcher counts sealed nodes from these events, never from the certs service's storage."""

    cluster: str
    nodes: list[str]
    # node -> the id of the agent key the bundle is sealed to: the dispatcher believes a node's
    # results only from this agent (learned from certs, which checked the provisioned key)
    agents: dict[str, str] = {}


class IssueCerts(Message):
    """Command: ensure the cluster's PKI and seal every registered agent's bundle again (sent by
    the dispatcher on `bke retry` after a certificates failure, and when workers join). Answered
    like a plan."""

    request_id: str
    cluster: str
    # "join": workers joining a running cluster (the dispatcher's join): the PKI ensured and the
    # new nodes sealed for the stored plan, without taking the cluster as an install in progress.
    # "apply": a changed spec's run (the upgrader) that has just stored its plan: the same, so the
    # leaves whose names change are re-issued (`CertsIssued.reissued`) and their nodes re-sealed
    purpose: Literal["install", "join", "apply"] = "install"


class RenewCerts(Message):
    """Renew leaf certificates: by name (`names`: row names such as `apiserver`, instance ids
    such as `apiserver@m1`, or `all`), or every leaf expiring within `within_days`. Exactly
    one of the two. CAs are never renewed this way."""

    request_id: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:@-]+$")
    cluster: str
    names: list[str] = []
    within_days: float | None = Field(None, gt=0, le=3650)
    origin: RenewOrigin = "cli"
    # The Kubernetes release the renewed certificates are for (an upgrade's target): subjects
    # kubeadm changes between releases follow it (bke.core.pki.subjects). Absent: every stored
    # subject is kept, as `kubeadm certs renew` keeps them.
    kubernetes_version: str | None = Field(None, pattern=r"^v?\d+\.\d+\.\d+$", max_length=32)

    @model_serializer(mode="wrap")
    def _added_fields_only_when_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return without_none(handler(self), self, ("kubernetes_version",))

    @model_validator(mode="after")
    def _one_selection(self) -> "RenewCerts":
        if bool(self.names) == (self.within_days is not None):
            raise ValueError("names / withinDays: give exactly one (certificate names, or a number of days)")
        return self


class RenewedCertificate(Message):
    name: str  # the certificate table's row, e.g. "apiserver"
    instance: str  # e.g. "apiserver@m1"
    nodes: list[str]  # every node that holds this certificate's files
    serial: str  # hex
    not_after: str


class CertsRenewed(Message):
    """One event per renewal request, listing every renewed certificate with its nodes (so
    the dispatcher starts one rotation). The affected nodes' sealed bundles are already
    re-sealed when this is published. An empty list: nothing matched (nothing to deliver)."""

    request_id: str
    cluster: str
    origin: RenewOrigin = "cli"
    certificates: list[RenewedCertificate]
    at: str


CHANNELS: tuple[Channel, ...] = (
    Channel(CERTS_ISSUED, CertsIssued, "event", "The cluster PKI is ensured for a plan (references, never keys); the upgrader reads the answer to a changed spec's re-issue.", ("certs",), ("dispatcher", "upgrader")),
    Channel(CERTS_FAILED, CertsFailed, "event", "The PKI could not be ensured, or one node's bundle could not be sealed (the install fails with this reason), or a renewal was refused or failed.", ("certs",), ("dispatcher", "cli", "upgrader")),
    Channel(CERTS_SEALED, CertsSealed, "event", "These nodes' bundles are sealed to their agents and stored.", ("certs",), ("dispatcher",)),
    Channel(ISSUE_CERTS, IssueCerts, "command", "Ensure the PKI and seal every agent's bundle again (a retry after a certificates failure, a join, a changed spec whose certificate names change).", ("dispatcher", "upgrader"), ("certs",)),
    Channel(RENEW_CERTS, RenewCerts, "command", "Renew leaf certificates: by name, all, or those expiring within N days (the certs service's automatic renewal sends it too; the upgrader, for the components it upgrades).", ("cli", "certs", "upgrader"), ("certs",)),
    Channel(CERTS_RENEWED, CertsRenewed, "event", "A renewal request's certificates were renewed and re-sealed: one event listing each with its nodes; the dispatcher rotates them onto the nodes (the upgrader delivers those of its own renewal, origin upgrade).", ("certs",), ("dispatcher", "cli", "upgrader")),
)
