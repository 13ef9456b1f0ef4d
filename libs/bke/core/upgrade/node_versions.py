"""Which versions each node's components run, as an upgrade leaves them: pure.

Why a record per node: an upgrade may end with nodes behind the rest (left out because their
agent was not alive, failed or rolled back, or never reached because the upgrade stopped
earlier), and the stored plan says one version for the whole cluster. Like a Cluster API
Machine's version next to its control plane's, each node's own versions are kept
(`bke:<c>:upgrade:nodes`, part of the upgrade record in bke.core.state.schema), so that
`bke retry --nodes` knows which nodes are behind, on what, and refuses one that is not.

`settled(run, answers, previous)` is computed once, when a run ends, for the nodes the run was
about (its batches and its left-out nodes); other nodes keep their entries. A node is at the
run's target when every step that changes one of its components was done on it; otherwise it
keeps the versions it ran before (its previous entry, or the run's starting versions) and
names what was done on it and why it stopped.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Mapping

from bke.contracts.statuses import NodeOutcomeStatus, OperationStatus, RunStatus

from .run import UpgradeRun, upgrade_command_id

__all__ = ["CHANGING_STEPS", "NodeVersion", "settled", "stopped_batch_ids"]

# The steps that replace a node's files (agents, snapshots and post-checks change nothing).
CHANGING_STEPS = frozenset({"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler",
                            "masters-runtime", "workers"})


@dataclass(frozen=True)
class NodeVersion:
    version: dict[str, str]  # kubernetes, etcd, containerd: what every component of the node runs
    request_id: str  # the upgrade that wrote this entry
    target: dict[str, str] | None = None  # the versions it is behind on; None: not behind
    why: str = ""  # why it is behind
    done: list[str] = field(default_factory=list)  # steps of that upgrade done on it all the same

    @property
    def behind(self) -> bool:
        return self.target is not None

    def to_json(self) -> str:
        doc: dict[str, object] = {"version": self.version, "requestId": self.request_id}
        if self.target is not None:
            doc.update(target=self.target, why=self.why, done=self.done)
        return json.dumps(doc, separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, raw: str | bytes) -> "NodeVersion":
        doc = json.loads(raw)
        return cls(version=dict(doc["version"]), request_id=str(doc["requestId"]), target=doc.get("target"),
                   why=str(doc.get("why", "")), done=list(doc.get("done", [])))


def stopped_batch_ids(run: UpgradeRun) -> list[str]:
    """The command ids of the batch a failed node step stopped in: whose answers say which of
    its nodes were done after all (the others of a failed batch succeeded)."""
    step = run.step_now()
    if step is None or step.local or step.status != RunStatus.FAILED or not step.sent:
        return []
    return [upgrade_command_id(run.cluster, run.request_id, step.name, step.group, h) for h in step.current()]


def _done_on(run: UpgradeRun, answers: Mapping[str, Mapping[str, str]]) -> tuple[set[str], dict[str, list[str]], dict[str, list[str]]]:
    """Hosts in the run's batches; per host the changing steps it is in, and those done on it."""
    hosts: set[str] = set()
    wanted: dict[str, list[str]] = {}
    done: dict[str, list[str]] = {}
    for step in run.steps:
        if step.local:
            continue
        for i, batch in enumerate(step.batches):
            hosts.update(batch)
            if step.name not in CHANGING_STEPS:
                continue
            if step.status == RunStatus.SUCCEEDED:
                finished = True
            elif step.status == RunStatus.PENDING:
                finished = False
            elif i < step.batch:
                finished = True
            elif i == step.batch:
                # its commands all answered, only the uncordon left; or, in a failed batch,
                # per node: the nodes whose own command succeeded
                finished = step.stage == "uncordon" and step.status != RunStatus.FAILED
            else:
                finished = False
            for h in batch:
                name = step.name + (f"/{step.group}" if step.group else "")
                wanted.setdefault(h, []).append(name)
                ok = finished
                if i == step.batch and step.status == RunStatus.FAILED and step.sent and not ok:
                    a = answers.get(upgrade_command_id(run.cluster, run.request_id, step.name, step.group, h))
                    ok = a is not None and a.get("status") == RunStatus.SUCCEEDED
                if ok:
                    done.setdefault(h, []).append(name)
    return hosts, wanted, done


def settled(run: UpgradeRun, answers: Mapping[str, Mapping[str, str]],
            previous: Mapping[str, NodeVersion]) -> dict[str, NodeVersion]:
    """Each node of a finished `run`, at its target or behind (module docstring). `answers`:
    the stopped batch's (stopped_batch_ids); `previous`: the entries before this run."""
    hosts, wanted, done = _done_on(run, answers)
    hosts.update(run.left_out)
    failed = {f.hostname: f for f in run.failed}
    stopped = run.step_now()
    out: dict[str, NodeVersion] = {}
    for h in sorted(hosts):
        missing = [s for s in wanted.get(h, []) if s not in done.get(h, [])]
        if h not in run.left_out and (run.status == OperationStatus.SUCCEEDED or not missing):
            out[h] = NodeVersion(version=dict(run.target), request_id=run.request_id)
            continue
        before = previous.get(h)
        version = dict(before.version) if before is not None else dict(run.current)
        if h in run.left_out:
            why = "left out: its agent was not alive when the upgrade started"
        elif h in failed:
            f = failed[h]
            how = "rolled back" if f.status == NodeOutcomeStatus.ROLLED_BACK else "failed"
            why = f"{how} at {f.step}" + (f" ({f.failed_step})" if f.failed_step else "")
        else:
            why = f"not reached: the upgrade stopped at {stopped.name}" if stopped is not None else "not reached"
        out[h] = NodeVersion(version=version, request_id=run.request_id, target=dict(run.target), why=why,
                             done=done.get(h, []))
    return out
