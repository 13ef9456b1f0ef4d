"""Renewal decisions, pure: may a renewal run now, and is an automatic one due.

One operation per cluster: the certs service knows a cluster's install and rotation from the
dispatcher's events (`install finished`, `rotation changed`) and from the renewals it handed
over itself (`pending`: renewed, waiting for its rotation to finish). From that view:

    renew_refusal(request, view)            -> "" or why a renewal may not run now
    auto_renew_decision(rows, now, ...)     -> renew (these are due) | skip (why) | none

A requested renewal is refused only while another rotation runs or waits to: whether the
install is finished is the dispatcher's judgement when it starts the rotation (this view
learns the end of an install a moment after the dispatcher, and a renewal asked for right
after an install must not fail on that). An automatic renewal waits for a view that says
the install Succeeded, and is simply tried again at the next tick.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from bke.contracts.certs import RenewCerts
from bke.contracts.statuses import InstallStatus, OperationStatus
from bke.core.pki.expiry import ExpiryRow

__all__ = ["AutoRenew", "OpsView", "auto_renew_decision", "auto_request_id", "renew_refusal"]


@dataclass(frozen=True)
class OpsView:
    install: str | None = None  # "Running" from a plan, then the install's final status
    rotation: str | None = None  # the last rotation's status
    rotation_id: str | None = None
    pending: str | None = None  # a renewal handed to the dispatcher, its rotation not finished
    # the operation holding the cluster's slot, in words ("upgrade u1 of c is running: ...";
    # bke.adapters.state.operation_slot), "" when none does: an automatic renewal waits for it
    busy: str = ""


@dataclass(frozen=True)
class AutoRenew:
    action: Literal["renew", "skip", "none"]
    reason: str = ""
    due: tuple[str, ...] = ()


def renew_refusal(cluster: str, req: RenewCerts, view: OpsView) -> str:
    if view.rotation == OperationStatus.RUNNING and view.rotation_id != req.request_id:
        return f"rotation {view.rotation_id} of {cluster} is still running; renew again when it has finished"
    if view.pending and view.pending != req.request_id:
        return f"renewal {view.pending} of {cluster} is still waiting for its rotation; renew again when it has finished"
    return ""


def auto_renew_decision(rows: list[ExpiryRow], now: datetime, within: timedelta, view: OpsView) -> AutoRenew:
    """Renew every leaf expiring within `within` of `now`, unless the cluster is busy."""
    due = tuple(r.instance for r in rows if not r.is_ca and r.not_after <= now + within)
    if not due:
        return AutoRenew("none")
    if view.install != InstallStatus.SUCCEEDED:
        return AutoRenew("skip", f"the install is {view.install or 'not known to have finished'}", due)
    if view.busy:
        return AutoRenew("skip", view.busy, due)
    if view.rotation == OperationStatus.RUNNING:
        return AutoRenew("skip", f"rotation {view.rotation_id} is running", due)
    if view.pending:
        return AutoRenew("skip", f"renewal {view.pending} is waiting for its rotation", due)
    return AutoRenew("renew", f"{len(due)} certificate(s) expire within {within.days} days", due)


def auto_request_id(now: datetime) -> str:
    """Deterministic per tick: two replicas ticking at the same second send one request."""
    return f"auto-{now:%Y%m%dT%H%M%SZ}"
