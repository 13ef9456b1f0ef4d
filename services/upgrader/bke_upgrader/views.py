"""The upgrade as the bus shows it: the whole view (`UpgradeView`) of a run's record, carried by
every `UpgradeChanged` and answered on `bke.v1.upgrade.get` (`answer_view`, which answers an etcd
restore's view on `bke.v1.etcd-restore.get` the same way)."""
from __future__ import annotations

from collections.abc import Awaitable, Callable

from pydantic import ValidationError

from bke.contracts.base import Message
from bke.contracts.restore import GetEtcdRestore
from bke.contracts.status import StatusError
from bke.contracts.upgrade import GetUpgrade, UpgradeNode, UpgradeStepView, UpgradeVersions, UpgradeView
from bke.core.upgrade.order import ExpandedStep
from bke.core.upgrade.run import StepRun, UpgradeRun

__all__ = ["answer_view", "expanded", "view"]


def view(run: UpgradeRun) -> UpgradeView:
    now = run.step_now()
    return UpgradeView(
        request_id=run.request_id, status=run.status, current=UpgradeVersions(**run.current),
        target=UpgradeVersions(**run.target),
        steps=[UpgradeStepView(name=s.name, group=s.group, status=s.status, done=s.done, total=s.total,
                               batches=len(s.batches)) for s in run.steps],
        step=now.name if now else "", started_at=run.started_at, finished_at=run.finished_at, message=run.message,
        failed=[UpgradeNode(hostname=f.hostname, status=f.status, step=f.step, failed_step=f.failed_step,
                            stderr=f.stderr[:500]) for f in run.failed],
        left_out=run.left_out, retry_of=run.retry_of,
    )


def expanded(step: StepRun) -> ExpandedStep:
    """A run's step as the order expanded it (for the accepted answer's step views)."""
    return ExpandedStep(step.name, step.group, tuple(tuple(b) for b in step.batches), step.drain)


async def answer_view(data: bytes, model: type[GetUpgrade] | type[GetEtcdRestore],
                      view_of: Callable[[str], Awaitable[Message | None]], what: str,
                      invalid: Callable[[ValidationError], StatusError] | None = None) -> bytes:
    """The answer to a request (`model`) for a cluster's current or last `what`: its view, or a
    StatusError naming what is wrong (a bad request: `invalid`'s, else its first error; no such
    run; an outage); never an exception, so the requester never waits out its timeout."""
    try:
        req = model.model_validate_json(data)
    except ValidationError as exc:
        bad = invalid(exc) if invalid is not None else \
            StatusError(reason="Invalid", message=f"invalid {what} request: {exc.errors()[0]['msg']}")
        return bad.to_bytes()
    try:
        v = await view_of(req.cluster)
    except Exception as exc:  # noqa: BLE001 - an outage (or an unreadable record) is an answer
        return StatusError(reason="Unavailable", cluster=req.cluster,
                           message=f"{type(exc).__name__}: {exc}"[:500]).to_bytes()
    if v is None:
        return StatusError(reason="NotFound", cluster=req.cluster, message=f"cluster '{req.cluster}': no {what}").to_bytes()
    return v.to_bytes()
