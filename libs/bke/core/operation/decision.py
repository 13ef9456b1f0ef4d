"""What an operation's pure `decide` returns: one decision, as data. The loop
(bke.adapters.operation) carries out a `Send` or a `RunLocally` through the operation's table of
carriers, keyed by `action`, then decides again, until a `Wait`, `Succeed` or `Fail` ends the pass.

    Send(nodes, action)     commands go to these nodes' agents ("send", or the name of one of
                            the operation's several commands: a reset's "snapshot")
    RunLocally(action, nodes)  work the dispatcher does itself (an API call, asking a service)
    Wait(reason, delay, since) nothing to do until an answer comes, or `delay` passes
    Succeed(reason)         the operation ends Succeeded
    Fail(reason, nodes)     the operation ends Failed, on these nodes
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

from bke.contracts.statuses import RunStatus

from .record import StepRun

__all__ = ["WAIT_S", "Act", "Decision", "Fail", "RunLocally", "Send", "Succeed", "Wait", "failed_node"]

# Look again this often even without an answer (a restart, a lost kick).
WAIT_S = 5.0


@dataclass(frozen=True)
class Send:
    nodes: tuple[str, ...]
    action: str = "send"


@dataclass(frozen=True)
class RunLocally:
    action: str
    nodes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Wait:
    action: ClassVar[str] = "wait"
    reason: str = ""
    delay: float = WAIT_S
    # when this wait began, for the record to keep ("" = nothing to keep): a deadline counts from it
    since: str = ""


@dataclass(frozen=True)
class Succeed:
    action: ClassVar[str] = "succeed"
    reason: str = ""


@dataclass(frozen=True)
class Fail:
    action: ClassVar[str] = "fail"
    reason: str
    nodes: tuple[str, ...] = ()

    @property
    def node(self) -> str:
        """The first node it failed on ("" if none): what the pass's outcome names."""
        return self.nodes[0] if self.nodes else ""


Act = Send | RunLocally  # what a carrier carries out
Decision = Send | RunLocally | Wait | Succeed | Fail


def failed_node(runs: Iterable[StepRun]) -> Fail | None:
    """The first node whose command failed, as the end of the operation (its step and the start
    of its output as the reason); None while none has."""
    failed = next((n for n in runs if n.status == RunStatus.FAILED), None)
    if failed is None:
        return None
    return Fail(f"node {failed.hostname} step {failed.step}: {failed.stderr[:500]}", (failed.hostname,))
