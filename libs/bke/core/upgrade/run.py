"""A running upgrade, the pure part: its record, and what to do next given the agents' answers.

The upgrade is the order table (`order.ORDER`) expanded for one plan into steps of batches.
Each reconcile folds the recorded results into the record and returns one decision; the
upgrader's adapters carry it out and save the record. No Redis, no bus, no clock here.

    decide(run, results) -> local(step) | drain(hosts) | send(hosts) | uncordon(hosts)
                            | wait | succeed | fail(reason) | done

Why it is safe to re-run after a crash at any point: a batch's commands have fixed ids (the
request, the step and the host: `command_id`), so a batch sent twice is one command per node
(JetStream drops the duplicate publish; an agent that completed it replays its result); drain,
uncordon and the local steps are idempotent; and the record only moves forward.

A failed node stops the upgrade: the rest of its batch is waited for, nothing further is sent,
and the reason names the node, its failed agent step and what the agent said (a rolled-back
node says so: its old files are back). Nodes of later batches are untouched.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal, Mapping

from bke.contracts.drain import DrainOptions
from bke.contracts.statuses import NodeOutcomeStatus, OperationStatus, RunStatus
from bke.core.operation.record import Ends

from .order import ExpandedStep
from .run_request import DRAIN_TIMEOUT_S, ApplyRequest, RunRequest, UpgradeRequest, read_request, wire
from .steps import LOCAL_STEPS, StepKind

__all__ = [
    "LOCAL_STEPS",
    "DRAIN_STEP",
    "UNREGISTER_STEP",
    "Decision",
    "NodeOutcome",
    "StepRun",
    "UpgradeRun",
    "awaited_ids",
    "batch_command_ids",
    "decide",
    "fold_results",
    "new_run",
    "step_slug",
    "upgrade_command_id",
]

# the two local steps of a changed spec's run that act through the cluster's API on its nodes
DRAIN_STEP, UNREGISTER_STEP = StepKind.DRAIN_NODES, StepKind.DELETE_NODE_OBJECTS
SLUG_PREFIX = "upgrade@"
STDERR_KEEP = 2000
FAILED_KEEP = 50
_OPEN = (RunStatus.PENDING, RunStatus.RUNNING, RunStatus.FAILED)  # a step not done yet
ROLLED_BACK = "rolled back"  # how the agent's ReplaceFiles step starts a rollback's stderr

Stage = Literal["drain", "run", "uncordon"]


def step_slug(request_id: str, step: str, group: str = "") -> str:
    """The command slug of one step: request, step and (etcd steps) the etcd cluster."""
    return f"{SLUG_PREFIX}{request_id}@{step}" + (f".{group}" if group else "")


def upgrade_command_id(cluster: str, request_id: str, step: str, group: str, host: str) -> str:
    # the install's command id shape (cluster/slug/node/gen): one generation, a retry is a new request
    return f"{cluster}/{step_slug(request_id, step, group)}/{host}/0"


@lru_cache(maxsize=16)
def _batch_ids(cluster: str, request_id: str, step: str, group: str, hosts: tuple[str, ...]) -> tuple[str, ...]:
    """The command ids of one batch. Why cached: a pass asks for them two or three times
    (awaited_ids, fold_results), and a batch is waited on by tens of passes; at 5,000 nodes
    (500-node batches) building the same ids again was a million calls per upgrade. The key is
    the batch's every input (its hosts too), so a hit is the same answer, never a stale one."""
    return tuple(upgrade_command_id(cluster, request_id, step, group, h) for h in hosts)


def batch_command_ids(run: "UpgradeRun", step: "StepRun") -> tuple[str, ...]:
    """The command ids of `step`'s current batch, in the order of its hosts."""
    return _batch_ids(run.cluster, run.request_id, step.name, step.group, tuple(step.current()))


def is_upgrade_command(command_id: str) -> bool:
    parts = command_id.split("/")
    return len(parts) == 4 and parts[1].startswith(SLUG_PREFIX)


@dataclass
class StepRun:
    name: str
    group: str = ""
    drain: bool = False
    batches: list[list[str]] = field(default_factory=list)
    status: RunStatus = RunStatus.PENDING
    batch: int = 0  # index of the batch in progress
    stage: Stage = "run"
    sent: bool = False  # the current batch's commands are published
    sent_at: float = 0.0  # when (epoch seconds): a node silent long after that fails
    done: int = 0  # nodes done in this step
    message: str = ""  # why a local step failed

    def __post_init__(self) -> None:
        self.status = RunStatus(self.status)  # read back from JSON as a plain string

    @property
    def local(self) -> bool:
        return self.name in LOCAL_STEPS

    @property
    def total(self) -> int:
        return sum(len(b) for b in self.batches)

    def current(self) -> list[str]:
        return self.batches[self.batch] if self.batch < len(self.batches) else []


@dataclass
class NodeOutcome:
    hostname: str
    status: NodeOutcomeStatus
    step: str
    failed_step: str = ""
    stderr: str = ""

    def __post_init__(self) -> None:
        self.status = NodeOutcomeStatus(self.status)


@dataclass
class UpgradeRun(Ends):
    request_id: str
    cluster: str
    current: dict[str, str]  # kubernetes, etcd, containerd
    target: dict[str, str]
    steps: list[StepRun]
    started_at: str
    request: RunRequest | None = None  # what the run was accepted from (bke.core.upgrade.run_request)
    left_out: list[str] = field(default_factory=list)
    status: OperationStatus = OperationStatus.RUNNING
    finished_at: str = ""
    message: str = ""
    failed: list[NodeOutcome] = field(default_factory=list)
    agent_version: str = ""  # what every agent must report in the agents step ("": not checked)
    schema_version: int = 1

    def step_now(self) -> StepRun | None:
        return next((s for s in self.steps if s.status in _OPEN), None)

    # what the request says, whichever kind it is
    @property
    def is_apply(self) -> bool:
        """A changed spec's run (the upgrader's applies), not an upgrade's."""
        return isinstance(self.request, ApplyRequest)

    @property
    def plan_digest(self) -> str:
        """The stored plan's digest when the run started ("" if the record has none)."""
        return self.request.plan_digest if self.request is not None else ""

    @property
    def drain_timeout_s(self) -> float:
        return self.request.drain_timeout_s if self.request is not None else DRAIN_TIMEOUT_S

    @property
    def drain_options(self) -> DrainOptions:
        """What the run's drains may evict beyond kubectl's defaults (none unless the request said)."""
        return (self.request.drain if self.request is not None else None) or DrainOptions()

    @property
    def retry_of(self) -> str:
        """A retry's: the upgrade it completes ("" for any other run)."""
        return self.request.retry_of if isinstance(self.request, UpgradeRequest) else ""

    def to_json(self) -> str:
        # the same document as json.dumps(asdict(self)): asdict deep-copies every batch first,
        # 15x slower on a 5,000-node record, which is saved several times per batch
        return json.dumps(self, default=_plain, separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: str | bytes) -> "UpgradeRun":
        """The record; StoredVersionTooNew for a form this code does not know (bke.core.state.schema)."""
        from bke.core.state.schema import check_readable

        doc = json.loads(raw)
        check_readable("upgrade", doc.get("schema_version"), f"the upgrade record of {doc.get('cluster')}")
        doc["steps"] = [StepRun(**s) for s in doc["steps"]]
        doc["failed"] = [NodeOutcome(**f) for f in doc.get("failed", [])]
        doc["request"] = read_request(doc.get("request"))
        return cls(**doc)


def _plain(o: Any) -> Any:
    """A record's object as JSON: a dataclass as its fields, the request in its record form."""
    if isinstance(o, UpgradeRun) and o.request is not None:
        return {**o.__dict__, "request": wire(o.request)}
    return o.__dict__


def new_run(request_id: str, cluster: str, current: dict[str, str], target: dict[str, str],
            expanded: list[ExpandedStep], all_hosts: list[str], now: str, *,
            request: RunRequest | None = None, left_out: list[str] | None = None,
            agent_version: str = "") -> UpgradeRun:
    """The record of a new upgrade. `all_hosts` (minus the left-out ones) are the post-checks'
    one batch: every node's components are checked at the end."""
    skip = set(left_out or ())
    steps: list[StepRun] = []
    for e in expanded:
        batches = [list(b) for b in e.batches]
        if e.step == "post-checks":
            batches = [[h for h in all_hosts if h not in skip]]
        if not batches and e.step not in LOCAL_STEPS:
            continue  # a node step with no node (every member left out, say)
        # the name as a plain str, as a loaded record has it (a StepKind's repr is not its name)
        steps.append(StepRun(name=str(e.step), group=e.group, drain=e.drain, batches=batches,
                             stage="drain" if e.drain else "run"))
    return UpgradeRun(request_id=request_id, cluster=cluster, current=dict(current), target=dict(target),
                      steps=steps, started_at=now, request=request, left_out=sorted(skip),
                      agent_version=agent_version)


@dataclass(frozen=True)
class Decision:
    action: Literal["local", "drain", "send", "uncordon", "wait", "succeed", "fail", "done"]
    step: StepRun | None = None
    hosts: tuple[str, ...] = ()
    reason: str = ""


def _outcome(step: StepRun, host: str, r: Mapping[str, str]) -> NodeOutcome:
    stderr = str(r.get("stderr", ""))[-STDERR_KEEP:]
    rolled = ROLLED_BACK in stderr
    return NodeOutcome(hostname=host, status=NodeOutcomeStatus.ROLLED_BACK if rolled else NodeOutcomeStatus.FAILED, step=step.name,
                       failed_step=str(r.get("step", "")), stderr=stderr)


def awaited_ids(run: UpgradeRun) -> list[str]:
    """The command ids whose answers `fold_results` reads now: the current batch's, once sent
    (none otherwise). The adapter reads just these, not every answer of the run."""
    step = run.step_now()
    if step is None or step.local or step.status == RunStatus.FAILED or step.stage != "run" or not step.sent:
        return []
    return list(batch_command_ids(run, step))


def fold_results(run: UpgradeRun, results: Mapping[str, Mapping[str, str]], now_s: float | None = None,
                 answer_deadline_s: float = 0.0) -> bool:
    """Fold the agents' answers into the current node step's batch. Returns whether the record
    changed. A batch is over when every node answered; a failure then fails the step. A node
    that has not answered `answer_deadline_s` after its batch was sent (a dead agent: its
    command's own steps time out well before) counts as failed, so the upgrade stops instead
    of waiting forever."""
    step = run.step_now()
    if step is None or step.local or step.status == RunStatus.FAILED or step.stage != "run" or not step.sent:
        return False
    hosts = step.current()
    answers: dict[str, Mapping[str, str] | None] = {
        h: results.get(cid) for h, cid in zip(hosts, batch_command_ids(run, step))}
    if any(a is None for a in answers.values()):
        if now_s is None or answer_deadline_s <= 0 or now_s - step.sent_at < answer_deadline_s:
            return False  # still waiting for some node of the batch
        silent = f"no answer within {answer_deadline_s:.0f}s of the command (is its agent running?)"
        answers = {h: a if a is not None else {"status": RunStatus.FAILED, "step": "answer", "stderr": silent}
                   for h, a in answers.items()}
    if step.name == "agents" and run.agent_version:
        answers = {h: _version_checked(a, run.agent_version) for h, a in answers.items()}
    bad = [(h, a) for h, a in answers.items() if a is not None and a.get("status") != RunStatus.SUCCEEDED]
    if bad:
        for h, a in bad:
            if len(run.failed) < FAILED_KEEP:
                run.failed.append(_outcome(step, h, a))
        step.status = RunStatus.FAILED
        step.done += len(hosts) - len(bad)
        return True
    step.done += len(hosts)
    _batch_done(step)
    return True


def _version_checked(answer: Mapping[str, str] | None, expected: str) -> Mapping[str, str] | None:
    """An agents-step answer from an agent of another version is a failure: every later step
    relies on what this BKE's agent can do (ReplaceFiles, EtcdSnapshot)."""
    if answer is None or answer.get("status") != RunStatus.SUCCEEDED or answer.get("agentVersion", "") == expected:
        return answer
    got = answer.get("agentVersion") or "an unknown version"
    return {"status": RunStatus.FAILED, "step": "agent-version",
            "stderr": f"the agent runs {got}, this BKE ships {expected}: install the new agent "
                      "(`bke agent bootstrap`) and upgrade again"}


def _batch_done(step: StepRun) -> None:
    if step.drain:
        step.stage = "uncordon"
        return
    _next_batch(step)


def _next_batch(step: StepRun) -> None:
    step.batch += 1
    step.sent = False
    step.stage = "drain" if step.drain else "run"
    if step.batch >= len(step.batches):
        step.status = RunStatus.SUCCEEDED


def decide(run: UpgradeRun) -> Decision:
    """The next thing to do. The adapters report back through the `mark_*` functions."""
    if not run.running:
        return Decision("done")
    step = run.step_now()
    if step is None:
        return Decision("succeed")
    if step.status == RunStatus.FAILED:
        return Decision("fail", step, reason=failure_reason(run, step))
    if step.local:
        return Decision("local", step)
    hosts = tuple(step.current())
    if step.stage == "drain":
        return Decision("drain", step, hosts)
    if step.stage == "uncordon":
        return Decision("uncordon", step, hosts)
    if not step.sent:
        return Decision("send", step, hosts)
    return Decision("wait", step, hosts)


def failure_reason(run: UpgradeRun, step: StepRun) -> str:
    mine = [f for f in run.failed if f.step == step.name]
    if step.message or not mine:
        return f"{step.name}: {step.message or 'failed'}"
    f = mine[0]
    what = "rolled back" if f.status == NodeOutcomeStatus.ROLLED_BACK else "failed"
    more = f" (and {len(mine) - 1} more node(s))" if len(mine) > 1 else ""
    return f"{step.name}{'/' + step.group if step.group else ''}: node {f.hostname} {what} at step {f.failed_step}: {f.stderr[:500]}{more}"


# The adapters' reports: each moves the record forward by one fact.

def mark_local(step: StepRun, ok: bool, message: str = "") -> None:
    step.status = RunStatus.SUCCEEDED if ok else RunStatus.FAILED
    step.done = step.total
    step.message = message


def mark_local_batch(step: StepRun) -> None:
    """A local step's batch is done (a dispatcher request of the apply's membership steps): on
    to the next batch, or the step has succeeded."""
    step.status = RunStatus.RUNNING
    step.done += len(step.current())
    _next_batch(step)


def mark_drained(step: StepRun) -> None:
    step.status = RunStatus.RUNNING
    step.stage = "run"
    step.sent = False


def mark_sent(step: StepRun, at_s: float) -> None:
    step.status = RunStatus.RUNNING
    step.sent = True
    step.sent_at = at_s


def mark_uncordoned(step: StepRun) -> None:
    _next_batch(step)


def finish(run: UpgradeRun, ok: bool, now: str, message: str = "") -> None:
    run.finish(OperationStatus.SUCCEEDED if ok else OperationStatus.FAILED, message, now)
