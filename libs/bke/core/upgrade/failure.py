"""A pass that cannot be carried out: the run ends Failed, with a reason naming the step and node.

The upgrader's adapters raise two kinds of errors while they carry out a decision
(bke.core.upgrade.run.decide) and only one of them may end the upgrade:

    an outage          TemporaryError, or anything bke.core.errors.is_unavailable recognises (Redis
                       or NATS away): the pass is tried again later and resumes where the record
                       says; nothing is decided from it
    anything else      a PermanentError (a stored record of an unknown form, a refused input), or
                       a bug: trying the same pass again raises it again, so looping on it would
                       hold the cluster's upgrade "Running" forever. The run is finished Failed
                       here instead, and the user sees why and where.

`is_transient` tells the two apart; `AtNode` carries the node a permanent error happened at (one
node of a batch the upgrader could not serve); `abort_run` is the second case as a pure fact on
the record: no I/O, no clock (`now` is given).
"""
from __future__ import annotations

from bke.core.errors import TemporaryError, is_unavailable

from bke.contracts.statuses import NodeOutcomeStatus, RunStatus

from .run import FAILED_KEEP, STDERR_KEEP, NodeOutcome, UpgradeRun, finish

__all__ = ["UPGRADER_STEP", "AtNode", "abort_run", "error_text", "is_transient"]

# The `failed_step` of a node the upgrader itself could not serve (no agent step failed there).
UPGRADER_STEP = "upgrader"
ERROR_KEEP = 500
NODES_NAMED = 5


def is_transient(exc: BaseException) -> bool:
    """An outage or a "later": the pass is tried again; anything else ends the run."""
    return isinstance(exc, TemporaryError) or is_unavailable(exc)


class AtNode(Exception):
    """A permanent error while serving one node of a batch: carries the node for the reason."""

    def __init__(self, node: str, cause: BaseException):
        super().__init__(f"{node}: {cause}")
        self.node, self.cause = node, cause


def error_text(exc: BaseException) -> str:
    """`Type: message`, one line, bounded: what the user reads in the reason."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text[:ERROR_KEEP]


def abort_run(run: UpgradeRun, error: str, now: str, *, node: str = "", hosts: tuple[str, ...] = ()) -> str:
    """End a Running `run` Failed because the upgrader could not carry out its current step.
    `node` is the node being served when it failed (if one was); `hosts` the batch the decision
    was about. Returns the reason (also `run.message`). A finished run is left as it is."""
    if not run.running:
        return run.message
    step = run.step_now()
    if step is None:  # every step done: it failed while finishing (storing the new plan, say)
        reason = f"finishing the upgrade: {error}"
    else:
        where = step.name + (f"/{step.group}" if step.group else "")
        if node:
            who = f": node {node}"
        elif hosts:
            more = f" and {len(hosts) - NODES_NAMED} more" if len(hosts) > NODES_NAMED else ""
            who = f": batch of {', '.join(hosts[:NODES_NAMED])}{more}"
        else:
            who = ""
        reason = f"{where}{who}: the upgrader could not carry it out: {error}"
        step.status = RunStatus.FAILED
        step.message = reason
        if node and len(run.failed) < FAILED_KEEP:
            run.failed.append(NodeOutcome(hostname=node, status=NodeOutcomeStatus.FAILED, step=step.name, failed_step=UPGRADER_STEP,
                                          stderr=error[-STDERR_KEEP:]))
    finish(run, False, now, reason)
    return reason
