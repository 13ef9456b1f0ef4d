"""etcd restore, the pure part: the restore's own decision (bke.core.etcdsnap.restore_run.decide)
as the loop's (bke.core.operation), and the restore's views. No Redis, no bus, no clock.

    next_step(run) -> RunLocally(stage) | Send(hosts, stage) | Wait | Succeed | Fail(reason)

A decision's action is its stage's name: the carriers' table has one row per stage
(`restore.STAGES`), and two stages in a row with no node are two different decisions.
"""
from __future__ import annotations

from pydantic import ValidationError

from bke.contracts.base import ErrorItem
from bke.contracts.restore import EtcdRestoreView, RestoreNode, RestoreStageView
from bke.contracts.status import StatusError
from bke.core.etcdsnap.restore import STAGES, RestorePlan
from bke.core.etcdsnap.restore_run import RestoreRun, decide
from bke.core.operation import WAIT_S, Decision, Fail, RunLocally, Send, Succeed, Wait

__all__ = ["invalid_get", "next_step", "restore_view", "stage_views"]


def next_step(run: RestoreRun) -> Decision:
    d = decide(run)
    stage = d.stage.name if d.stage is not None else ""
    if d.action == "local":  # verify-snapshot: the upgrader checks it itself, before anything stops
        return RunLocally(stage)
    if d.action == "send":  # every node of the stage at once
        return Send(d.hosts, stage)
    if d.action == "wait":
        return Wait(f"waiting for the nodes of {stage}", WAIT_S)
    if d.action == "fail":
        return Fail(d.reason)
    return Succeed()


def stage_views(rp: RestorePlan) -> list[RestoreStageView]:
    return [RestoreStageView(name=s.name, summary=s.summary, nodes=list(rp.nodes(s))) for s in STAGES]


def restore_view(run: RestoreRun) -> EtcdRestoreView:
    summaries = {s.name: s.summary for s in STAGES}
    now = run.stage_now()
    return EtcdRestoreView(
        request_id=run.restore_id, etcd_cluster=run.etcd_cluster, snapshot_id=run.snapshot_id, status=run.status,
        stages=[RestoreStageView(name=s.name, summary=summaries.get(s.name, ""), status=s.status, nodes=s.nodes,
                                 done=len(s.done)) for s in run.stages],
        stage=now.name if now else "", started_at=run.started_at, finished_at=run.finished_at, message=run.message,
        failed=[RestoreNode(hostname=f["hostname"], stage=f["stage"], failed_step=f["failedStep"],
                            stderr=f["stderr"][:500]) for f in run.failed[:50]],
    )


def invalid_get(exc: ValidationError) -> StatusError:
    """A GetEtcdRestore that does not read: every wrong field named."""
    errors = [ErrorItem(path=".".join(str(p) for p in e["loc"]) or "(body)", message=e["msg"][:200])
              for e in exc.errors()[:20]]
    named = "; ".join(f"{e.path}: {e.message}" for e in errors)
    return StatusError(reason="Invalid", message=f"invalid etcd restore status request: {named}"[:1000], errors=errors)
