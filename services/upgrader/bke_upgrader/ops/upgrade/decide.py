"""The upgrade record's run, the pure part: the run's own decision (bke.core.upgrade.run.decide)
as the loop's (bke.core.operation). No Redis, no bus, no clock.

    next_step(run) -> RunLocally(step) | RunLocally("drain") | Send(hosts) | RunLocally("uncordon")
                      | Wait | Succeed | Fail(reason)

A local step's action is its step's kind (its row of carriers.CARRIERS); a node step's batch is
drained, sent or uncordoned (batches.py). Each names the batch it is about, so that two batches
of one step in a row are two different decisions.
"""
from __future__ import annotations

from bke.core.operation import Decision, Fail, RunLocally, Send, Succeed, Wait
from bke.core.upgrade.run import UpgradeRun, decide

__all__ = ["NODE_STAGES", "WAIT_S", "next_step"]

NODE_STAGES = ("drain", "send", "uncordon")  # a node step's batch, one decision at a time
WAIT_S = 5.0  # re-check a batch in flight this often even without a result


def next_step(run: UpgradeRun) -> Decision:
    d = decide(run)
    step = d.step
    if d.action == "local" and step is not None:
        return RunLocally(step.name, tuple(step.current()))
    if d.action == "send":
        return Send(d.hosts)
    if d.action in ("drain", "uncordon"):
        return RunLocally(d.action, d.hosts)
    if d.action == "wait":
        return Wait(f"waiting for {step.name if step else 'the batch'}", WAIT_S)
    if d.action == "fail":
        return Fail(d.reason)
    return Succeed()
