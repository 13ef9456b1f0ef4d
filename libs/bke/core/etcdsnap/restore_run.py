"""A running etcd restore, the pure part: its record, and what to do next given the agents' answers.

The restore is `restore.STAGES` for one plan: each stage is either run by the upgrader itself
(`verify-snapshot`) or one command to each of its nodes, all sent at once and all waited for
before the next stage (a new etcd cluster is healthy only once a quorum of its members runs, so
no member is started and waited for alone). No Redis, no bus, no clock here.

    decide(run) -> local(stage) | send(stage, hosts) | wait | succeed | fail(reason)

The upgrader's loop of it (bke_upgrader.ops.restore, on bke.adapters.operation) reads these
decisions through a thin mapping to the shared ones (bke.core.operation).

Why it is safe to re-run after a crash at any point: a stage's commands have fixed ids (the
restore, the stage and the host: `restore_command_id`), so a stage sent twice is one command per
node (JetStream drops the duplicate publish; an agent that completed it replays its result);
every agent step is idempotent (a parked manifest is not parked again; a member restored again
restores into a new dir and keeps the first aside dir); and the record only moves forward.

A failed node fails the restore: the rest of its stage is waited for, nothing further is sent,
and the reason names the node, its failed agent step and what the agent said. Nothing is undone
automatically: what was stopped stays stopped until a person looks (the old data dirs are kept).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Literal, Mapping

from bke.contracts.statuses import OperationStatus, RunStatus
from bke.core.operation.record import Ends
from bke.core.state.schema import check_readable
from .restore import STAGES, RestorePlan

__all__ = ["RestoreDecision", "RestoreRun", "StageRun", "awaited_ids", "decide", "fold_results",
           "is_restore_command", "mark_local", "mark_sent", "new_run", "restore_command_id"]

SLUG_PREFIX = "restore@"
STDERR_KEEP = 2000
# a stage not done yet: the one the restore is at (bke.contracts.statuses: the JSON keeps the strings)
_OPEN = (RunStatus.PENDING, RunStatus.RUNNING, RunStatus.FAILED)


def restore_command_id(cluster: str, restore_id: str, stage: str, host: str) -> str:
    # the install's command id shape (cluster/slug/node/gen), as the upgrade's
    return f"{cluster}/{SLUG_PREFIX}{restore_id}@{stage}/{host}/0"


def is_restore_command(command_id: str) -> bool:
    parts = command_id.split("/")
    return len(parts) == 4 and parts[1].startswith(SLUG_PREFIX)


@dataclass
class StageRun:
    name: str
    nodes: list[str]
    status: RunStatus = RunStatus.PENDING
    sent_at: float = 0.0
    done: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.status = RunStatus(self.status)  # read back from JSON as a plain string


@dataclass
class RestoreRun(Ends):
    restore_id: str
    cluster: str
    etcd_cluster: str
    snapshot_id: str
    sha256: str
    size: int
    started_at: str
    stages: list[StageRun]
    status: OperationStatus = OperationStatus.RUNNING
    finished_at: str = ""
    message: str = ""
    failed: list[dict[str, str]] = field(default_factory=list)  # hostname, stage, failedStep, stderr
    schema_version: int = 1  # bke.core.state.schema RECORDS "etcd-restore"

    @property
    def request_id(self) -> str:
        """The restore's request id, by the operations' common name (bke.core.operation.Record)."""
        return self.restore_id

    def stage_now(self) -> StageRun | None:
        return next((s for s in self.stages if s.status in _OPEN), None)

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: str | bytes) -> RestoreRun:
        doc = json.loads(raw)
        check_readable("etcd-restore", doc.get("schema_version"), f"the etcd restore record of {doc.get('cluster')}")
        doc["stages"] = [StageRun(**s) for s in doc["stages"]]
        return cls(**doc)


@dataclass(frozen=True)
class RestoreDecision:
    action: Literal["local", "send", "wait", "succeed", "fail", "done"]
    stage: StageRun | None = None
    hosts: tuple[str, ...] = ()
    reason: str = ""


def new_run(restore_id: str, rp: RestorePlan, sha256: str, size: int, started_at: str) -> RestoreRun:
    return RestoreRun(restore_id, rp.cluster, rp.etcd_cluster, rp.snapshot_id, sha256, size, started_at,
                      [StageRun(s.name, list(rp.nodes(s))) for s in STAGES])


def _local(stage: StageRun) -> bool:
    return next(s for s in STAGES if s.name == stage.name).where == "upgrader"


def awaited_ids(run: RestoreRun) -> list[str]:
    """The command ids whose answers the running stage waits for."""
    st = run.stage_now()
    if st is None or st.status != RunStatus.RUNNING:
        return []
    return [restore_command_id(run.cluster, run.restore_id, st.name, h) for h in st.nodes if h not in st.done]


def fold_results(run: RestoreRun, answers: Mapping[str, Mapping[str, str]], now: float, deadline_s: float) -> bool:
    """Fold the recorded answers into the running stage; True if anything changed. A node that
    has not answered `deadline_s` after the stage was sent fails it (a dead agent must not hold
    a cluster without its apiservers forever without saying so)."""
    st = run.stage_now()
    if st is None or st.status != RunStatus.RUNNING or not run.running:
        return False
    changed = False
    for host in st.nodes:
        if host in st.done:
            continue
        ans = answers.get(restore_command_id(run.cluster, run.restore_id, st.name, host))
        if ans is None:
            continue
        st.done.append(host)
        changed = True
        if ans.get("status") != RunStatus.SUCCEEDED:
            run.failed.append({"hostname": host, "stage": st.name, "failedStep": ans.get("step", ""),
                               "stderr": str(ans.get("stderr", ""))[-STDERR_KEEP:]})
    if len(st.done) < len(st.nodes) and st.sent_at and now - st.sent_at > deadline_s:
        for host in st.nodes:
            if host not in st.done:
                st.done.append(host)
                run.failed.append({"hostname": host, "stage": st.name, "failedStep": "",
                                   "stderr": f"no answer {deadline_s:g}s after the command was sent"})
        changed = True
    if len(st.done) == len(st.nodes):
        st.status = RunStatus.FAILED if any(f["stage"] == st.name for f in run.failed) else RunStatus.SUCCEEDED
        changed = True
    return changed


def decide(run: RestoreRun) -> RestoreDecision:
    """The next thing to do (one stage at a time, in the table's order)."""
    if not run.running:
        return RestoreDecision("done")
    st = run.stage_now()
    if st is None:
        return RestoreDecision("succeed")
    if st.status == RunStatus.FAILED:
        return RestoreDecision("fail", st, reason=_reason(run, st))
    if st.status == RunStatus.RUNNING:
        return RestoreDecision("wait", st)
    if _local(st):
        return RestoreDecision("local", st)
    return RestoreDecision("send", st, tuple(st.nodes))


def _reason(run: RestoreRun, st: StageRun) -> str:
    failed = [f for f in run.failed if f["stage"] == st.name]
    if not failed:
        return f"{st.name} failed"
    first = failed[0]
    if not first["hostname"]:  # a stage the upgrader ran itself
        return f"{st.name} failed: {first['stderr']}"
    step = f" (agent step {first['failedStep']})" if first["failedStep"] else ""
    more = f"; {len(failed) - 1} more node(s) failed" if len(failed) > 1 else ""
    return f"{st.name} failed on {first['hostname']}{step}: {first['stderr'].strip()[-500:]}{more}"


def mark_local(st: StageRun, ok: bool, run: RestoreRun, why: str = "") -> None:
    st.status = RunStatus.SUCCEEDED if ok else RunStatus.FAILED
    if not ok:
        run.failed.append({"hostname": "", "stage": st.name, "failedStep": "", "stderr": why})


def mark_sent(st: StageRun, now: float) -> None:
    st.status = RunStatus.RUNNING
    st.sent_at = now
    if not st.nodes:
        st.status = RunStatus.SUCCEEDED

