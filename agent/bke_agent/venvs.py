"""Which virtualenv the agent runs from, and what happens when a new one is on trial.

The record (`<state>/agent-venvs.json`) is written by the agent that installs an update (the
trial) and by the launcher (promotion, rollback); the new agent writes only its confirmation
(`<state>/agent-confirmed`: its version, once it consumes its node's commands). The launcher
decides from the record alone, with this module's pure functions, so a rollback never needs
the new code to run at all:

    launch_target(record)                               -> the venv to start (trial or current)
    after_start(record, confirmed)                      -> the record with the trial promoted
    after_exit(record, ran, code, confirmed, timed_out) -> (record, "restart" | "exit")

A trial that exits before confirming, or is still unconfirmed at its deadline, is rolled back:
the old venv is current again and the version is recorded as failed, so that the old agent,
given the same command again, fails it with the reason instead of trying forever.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Literal

from bke.contracts.agent import RESTART_EXIT_CODE

__all__ = [
    "CONFIRMED_FILE",
    "CONFLICT_EXIT_CODE",
    "RECORD_FILE",
    "Trial",
    "VenvRecord",
    "after_exit",
    "after_start",
    "confirm",
    "confirmed_version",
    "launch_target",
    "read_record",
    "write_record",
]

RECORD_FILE = "agent-venvs.json"
# bke-agent's exit when another agent still holds the node's state lock: after its launcher was
# killed, the agent it had started is still stopping; the launcher starts it again (after
# CONFLICT_WAIT_S), as systemd would after RestartSec
CONFLICT_EXIT_CODE = 3
CONFIRMED_FILE = "agent-confirmed"


@dataclass(frozen=True)
class Trial:
    venv: str
    version: str
    confirm_timeout_s: float


@dataclass(frozen=True)
class VenvRecord:
    current: str  # the venv (prefix) that runs when no trial does
    current_version: str
    trial: Trial | None = None
    previous: str | None = None  # the venv before the last promotion, kept for a manual rollback
    failed: dict[str, str] = field(default_factory=dict)  # version -> why it was rolled back


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)


def read_record(state: Path, current: str, version: str) -> VenvRecord:
    """The record, or one that names `current` (the venv this process runs from) when none exists."""
    try:
        doc = json.loads((state / RECORD_FILE).read_text())
    except FileNotFoundError:
        return VenvRecord(current=current, current_version=version)
    trial = doc.get("trial")
    return VenvRecord(current=doc["current"], current_version=doc["current_version"],
                      trial=Trial(**trial) if trial else None, previous=doc.get("previous"),
                      failed=dict(doc.get("failed") or {}))


def write_record(state: Path, rec: VenvRecord) -> None:
    _write_atomic(state / RECORD_FILE, json.dumps(asdict(rec), indent=1))


def confirm(state: Path, version: str) -> None:
    """Written by an agent once it consumes its node's commands: it came up."""
    _write_atomic(state / CONFIRMED_FILE, version)


def confirmed_version(state: Path) -> str | None:
    try:
        return (state / CONFIRMED_FILE).read_text().strip() or None
    except FileNotFoundError:
        return None


def launch_target(rec: VenvRecord) -> str:
    return rec.trial.venv if rec.trial is not None else rec.current


def after_start(rec: VenvRecord, confirmed: str | None) -> VenvRecord:
    """The trial agent confirmed its version: it becomes current, the old venv is kept as previous."""
    if rec.trial is None or confirmed != rec.trial.version:
        return rec
    return VenvRecord(current=rec.trial.venv, current_version=rec.trial.version, trial=None,
                      previous=rec.current, failed={k: v for k, v in rec.failed.items() if k != rec.trial.version})


def after_exit(rec: VenvRecord, ran: str, code: int, confirmed: str | None,
               timed_out: bool) -> tuple[VenvRecord, Literal["restart", "exit"]]:
    """What the launcher does when the agent it started from venv `ran` has exited (or was
    stopped at its trial's deadline: `timed_out`). `rec` is the record as it is now: a trial
    the exiting agent has just recorded is started next, not rolled back."""
    rec = after_start(rec, confirmed)
    if rec.trial is not None and rec.trial.venv == ran:  # the trial ran and never confirmed: roll back
        t = rec.trial
        why = (f"the new agent {t.version} did not come up within {t.confirm_timeout_s:g}s" if timed_out
               else f"the new agent {t.version} exited with {code} before it came up")
        return replace(rec, trial=None, failed={**rec.failed, t.version: why}), "restart"
    return rec, "restart" if code in (RESTART_EXIT_CODE, CONFLICT_EXIT_CODE) else "exit"
