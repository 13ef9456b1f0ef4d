"""The upgrade as the bus shows it: the whole view (`UpgradeView`) of a run's record, carried by
every `UpgradeChanged` and answered on `bke.v1.upgrade.get`."""
from __future__ import annotations

from bke.contracts.upgrade import UpgradeNode, UpgradeStepView, UpgradeVersions, UpgradeView
from bke.core.upgrade.order import ExpandedStep
from bke.core.upgrade.run import StepRun, UpgradeRun

__all__ = ["expanded", "view"]


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
