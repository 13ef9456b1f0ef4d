"""The request a run of the upgrade record carries (`UpgradeRun.request`), typed: what the run was
accepted from, kept in the record so that every pass, and a restarted upgrader, reads the same.

    UpgradeRequest  an upgrade's, and its retries': the `UpgradeCluster` it was accepted from,
                    the digest of the stored plan it started from, and for a retry
                    (bke.core.upgrade.retry) the upgrade it completes and the nodes it serves
    ApplyRequest    a changed spec's (the upgrader's applies): the spec, read inline or from
                    `specRef`, and the digests of the plan it starts from and of the one it leads to
    None            a record written without one (only tests write one, `null`; an older
                    release's `{}` reads as None too): an upgrade's defaults

Why these forms and not `ApplyCluster` for the apply: the record's form predates them (it was a
plain dict), and stored records must load and save again to the same bytes. `wire` writes the
fields a request set, in the order the dict had them (an UpgradeCluster's fields, then the
record's own); an ApplyCluster keeps a `specRef` and a dry run the record never held, and puts
its fields in another order, so the apply has a model of its own with the dict's fields.
"""
from __future__ import annotations

from typing import Any, Literal, Mapping

from pydantic import Field

from bke.contracts.base import Message
from bke.contracts.drain import DrainOptions
from bke.contracts.upgrade import UpgradeCluster

__all__ = ["DRAIN_TIMEOUT_S", "ApplyRequest", "RunRequest", "UpgradeRequest", "read_request", "wire"]

DRAIN_TIMEOUT_S = 300.0  # UpgradeCluster's and ApplyCluster's default


class UpgradeRequest(UpgradeCluster):
    """An upgrade's request as its run keeps it (`wire`: only the fields it set)."""

    plan_digest: str = ""  # the stored plan's when the run started: the compare-and-swap at its end
    retry_of: str = ""  # a retry: the upgrade whose nodes left behind it completes
    nodes: list[str] = Field(default_factory=list)  # a retry: the only nodes it serves
    addons_done: bool = False  # a retry: an earlier run of the upgrade applied the addons

    @classmethod
    def accepted(cls, req: UpgradeCluster, plan_digest: str) -> "UpgradeRequest":
        """The request as accepted (every field of it, defaults too), with the stored plan's digest."""
        return cls.model_validate({**req.model_dump(), "plan_digest": plan_digest})


class ApplyRequest(Message):
    """A changed spec's request as its run keeps it: every field is set."""

    kind: Literal["apply"]
    request_id: str
    cluster: str
    spec: str  # the BKECluster + BKENode YAML, placed again by each pass (placement is deterministic)
    plan_digest: str  # the stored plan's when the run started
    desired_digest: str  # the spec's plan's: the stored plan's once the run swapped it in
    drain_timeout_s: float
    drain: DrainOptions | None = None  # set only when the request named it (older records have none)


RunRequest = UpgradeRequest | ApplyRequest


def wire(request: RunRequest) -> dict[str, Any]:
    """The record's form: the fields the request set, camelCase."""
    return request.model_dump(mode="json", by_alias=True, exclude_unset=True)


def read_request(doc: Mapping[str, Any] | None) -> RunRequest | None:
    """The request of a stored record (`wire`'s form)."""
    if not doc:
        return None
    model: type[RunRequest] = ApplyRequest if doc.get("kind") == "apply" else UpgradeRequest
    return model.model_validate(doc)
