"""What the renderer and certs services said about a cluster, judged for a phase: pure.

The dispatcher learns the other services' progress only from their events (`manifests.rendered`,
`manifests.failed`, `certs.issued`, `certs.sealed`, `certs.failed`), recorded as `InputRecord`s;
it never counts another service's storage. An event about another plan than the install's (a
replaced spec) is stale and ignored.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from bke.contracts.statuses import InputStatus, PhaseNeed

__all__ = ["INPUT_SERVICE", "InputRecord", "InputStatus", "failed_input", "failure_reason", "is_current", "missing_input"]


# Which service answers for each input, as the user reads it in a failure reason. "seal" is one
# node's bundle that could not be sealed to its agent; it never becomes Ready (a sealed node is
# counted from `certs.sealed`), only Failed and, on retry, Requested.
INPUT_SERVICE = {"render": "renderer", "certs": "certs", "seal": "certs"}


@dataclass(frozen=True)
class InputRecord:
    status: InputStatus
    digest: str = ""  # the plan digest the service worked from ("" = not said)
    reason: str = ""
    kind: str = "operational"  # "invalid" | "operational"
    node: str | None = None

    def to_doc(self) -> dict:
        return {**asdict(self), "status": self.status.value}

    @classmethod
    def from_doc(cls, doc: dict) -> "InputRecord":
        return cls(**{**doc, "status": InputStatus(doc["status"])})


def is_current(event_digest: str, plan_digest: str) -> bool:
    """An event is about the install's plan unless both digests are known and differ."""
    return not event_digest or not plan_digest or event_digest == plan_digest


def failed_input(inputs: dict[str, InputRecord], plan_digest: str) -> tuple[str, InputRecord] | None:
    """The first input a service failed for this plan, with its name, or None."""
    for name in INPUT_SERVICE:
        rec = inputs.get(name)
        if rec is not None and rec.status is InputStatus.FAILED and is_current(rec.digest, plan_digest):
            return name, rec
    return None


def missing_input(needs: tuple[PhaseNeed, ...], inputs: dict[str, InputRecord], plan_digest: str, sealed: int,
                  nodes: int) -> str:
    """Why a phase that needs these inputs must wait ("" when it need not)."""
    render = inputs.get("render")
    if PhaseNeed.RENDER in needs and not _ready(render, plan_digest):
        return "waiting for rendered files"
    if PhaseNeed.CERTS in needs:
        if not _ready(inputs.get("certs"), plan_digest):
            return "waiting for the cluster's certificates"
        if sealed < nodes:
            return f"waiting for certificates sealed to every agent ({sealed}/{nodes})"
    return ""


def failure_reason(name: str, rec: InputRecord) -> str:
    return f"{INPUT_SERVICE[name]}: {rec.reason}"


def _ready(rec: InputRecord | None, plan_digest: str) -> bool:
    return rec is not None and rec.status is InputStatus.READY and is_current(rec.digest, plan_digest)
