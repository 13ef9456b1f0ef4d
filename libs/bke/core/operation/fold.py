"""Answers to an operation's commands and requests, and folding them into its record. Pure.

An answer is recorded beside the record as it arrives (bke.adapters.operation.RecordStore) and
folded in by the next pass, under the operation's lease: only the command in flight takes it,
so an answer that arrives twice, or late for a command already settled, counts once.

    <command id>     {status, step, stderr}               an agent's answer (Answer)
    input:<name>     {requestId, status, digest, reason}  a service's answer (ServiceAnswer)
"""
from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol, TypeVar

from bke.contracts.agent import CommandResult
from bke.contracts.statuses import FinishedStatus, RunStatus, StepResultStatus

from .record import StepRun

__all__ = [
    "INPUT_PREFIX", "STDERR_KEEP", "Answer", "Answers", "ServiceAnswer", "fold", "in_flight", "settle", "settle_in_flight",
]

INPUT_PREFIX = "input:"  # a results field that holds a service's answer, not an agent's
STDERR_KEEP = 2000  # of a failed step's output, the end is kept
REASON_KEEP = 2000

class Sent(Protocol):
    """A run that sends one command at a time (a node's, a reset's snapshot on a member)."""

    command_id: str
    status: RunStatus


R = TypeVar("R")
N = TypeVar("N", bound=Sent)
S = TypeVar("S", bound=StepRun)


@dataclass(frozen=True)
class Answer:
    """An agent's answer to one command: its status, and the step that failed with its output."""

    status: str
    step: str = ""
    stderr: str = ""

    @property
    def succeeded(self) -> bool:
        return self.status == FinishedStatus.SUCCEEDED

    @classmethod
    def of(cls, res: CommandResult) -> "Answer":
        failed = next((s for s in res.steps if s.status == StepResultStatus.FAILED), None)
        if failed is None:
            return cls(res.status)
        return cls(res.status, failed.id, failed.stderr or failed.stdout)

    def to_doc(self) -> str:
        return json.dumps({"status": self.status, "step": self.step, "stderr": self.stderr})


@dataclass(frozen=True)
class ServiceAnswer:
    """A service's answer to what an operation asked it (the renderer's, the certs service's):
    the request id it answers, Ready or Failed, the plan digest it worked on, and why not."""

    request_id: str
    status: str
    digest: str = ""
    reason: str = ""

    def to_doc(self) -> str:
        return json.dumps({"requestId": self.request_id, "status": self.status, "digest": self.digest,
                           "reason": self.reason[:REASON_KEEP]})


@dataclass(frozen=True)
class Answers:
    """Everything recorded beside a record: agents' answers by command id, services' by name."""

    commands: Mapping[str, Answer]
    services: Mapping[str, ServiceAnswer]

    @classmethod
    def parse(cls, fields: Mapping[str, str | bytes]) -> "Answers":
        commands: dict[str, Answer] = {}
        services: dict[str, ServiceAnswer] = {}
        for key, raw in fields.items():
            doc = json.loads(raw)
            if key.startswith(INPUT_PREFIX):
                services[key.removeprefix(INPUT_PREFIX)] = ServiceAnswer(
                    doc.get("requestId", ""), doc["status"], doc.get("digest", ""), doc.get("reason", ""))
            else:
                commands[key] = Answer(doc["status"], doc.get("step", ""), doc.get("stderr", ""))
        return cls(commands, services)


def in_flight(runs: Iterable[N], command_id: str) -> N | None:
    """The run whose command in flight `command_id` is; None for a duplicate or a stale answer."""
    run = next((r for r in runs if r.command_id == command_id), None)
    return run if run is not None and run.status == RunStatus.RUNNING else None


def settle(run: StepRun, answer: Answer) -> None:
    """The run's command answered: Succeeded, or Failed with its step and the end of its output."""
    run.status = RunStatus.SUCCEEDED if answer.succeeded else RunStatus.FAILED
    run.step, run.stderr = answer.step, answer.stderr[-STDERR_KEEP:]


def settle_in_flight(runs: Iterable[S], command_id: str, answer: Answer) -> S | None:
    """The run whose command in flight `command_id` is, settled with `answer`; None (nothing
    settled) for a duplicate or a stale answer."""
    run = in_flight(runs, command_id)
    if run is not None:
        settle(run, answer)
    return run


def fold(rec: R, answers: Mapping[str, Answer], apply: Callable[[R, str, str, str, str], bool]) -> bool:
    """Every agent's answer through the operation's `apply(rec, command id, status, step,
    stderr)` (False when it is not a command in flight); whether any changed the record."""
    changed = False
    for cid, a in answers.items():
        changed |= apply(rec, cid, a.status, a.step, a.stderr)
    return changed
