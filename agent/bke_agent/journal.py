"""What the agent has done, on disk: the stored result of every completed command, and a log
of real executions.

Why: JetStream delivers at least once. A command is acked only after its result is stored
here and published, so a crash anywhere before the ack means a redelivery; the agent then
finds the stored result and answers it again (`replayed=True`) without running anything.

    <state>/results/<sha256(command id)>.json   the CommandResult, written atomically
                                                (temp file + fsync + rename + fsync of the dir)
    <state>/executions.jsonl                    one line per real execution that completed:
                                                {"commandId", "phase", "cluster", "node",
                                                 "status", "startedAt", "finishedAt", "agentId"}

The executions log is what tests and the lab count to prove that no completed command ran
twice: a command id appears in it at most once. It is appended after the result is stored,
so a crash between the two loses one line rather than ever showing a replay as a run.
Results older than `keep_days` (longer than the stream keeps commands) are pruned. The log
rotates once it would pass `max_log_bytes` (to `executions.jsonl.1`, replacing the older one):
periodic health checks run commands for as long as the node lives, so it must not grow forever.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

from pydantic import ValidationError

from bke.contracts.agent import CommandResult

from .fsutil import write_atomic

__all__ = [
    "DiskJournal",
    "ExecutionRecord",
    "Journal",
    "MemoryJournal",
    "execution_counts",
    "read_executions",
]

RESULTS_DIR = "results"
EXECUTIONS_FILE = "executions.jsonl"
ROTATED_SUFFIX = ".1"
MAX_LOG_BYTES = 16 * 1024 * 1024  # ~40,000 executions per generation; two generations on disk
PRUNE_EVERY = 500  # puts between two prunes
log = logging.getLogger("bke.agent.journal")


@dataclass(frozen=True, slots=True)  # one object per line (no __dict__): a fleet keeps 15,000 in memory
class ExecutionRecord:
    commandId: str  # noqa: N815 - the JSON field names of the log, camelCase like the bus
    phase: str
    cluster: str
    node: str
    status: str
    startedAt: str  # noqa: N815
    finishedAt: str  # noqa: N815
    agentId: str  # noqa: N815

    @classmethod
    def of(cls, result: CommandResult, phase: str) -> ExecutionRecord:
        return cls(result.command_id, phase, result.cluster, result.node, result.status,
                   result.started_at, result.finished_at, result.agent_id)


class Journal(Protocol):
    """Where completed results and the executions log are kept."""

    def get(self, command_id: str) -> CommandResult | None: ...

    def put(self, result: CommandResult) -> None: ...

    def record_execution(self, record: ExecutionRecord) -> None: ...


class MemoryJournal:
    """A journal that lives as long as the process: for benchmark fleets and unit tests.

    Each result is kept as its JSON bytes, as the disk journal keeps it, and read back the same
    way. Why not the model: bytes are one object the garbage collector never walks, a result
    model is six; a benchmark fleet of 5,000 agents in one process held 90,000 of them after a
    5,000-node upgrade, and every full collection walked them all (a real agent's journal is
    on disk)."""

    def __init__(self) -> None:
        self.results: dict[str, bytes] = {}
        self.executions: list[ExecutionRecord] = []

    def get(self, command_id: str) -> CommandResult | None:
        raw = self.results.get(command_id)
        return None if raw is None else CommandResult.model_validate_json(raw)

    def put(self, result: CommandResult) -> None:
        self.results[result.command_id] = result.to_bytes()

    def record_execution(self, record: ExecutionRecord) -> None:
        self.executions.append(record)


class DiskJournal:
    """The real agent's journal under its state directory (see the module docstring)."""

    def __init__(self, state_dir: Path, *, fsync: bool = True, keep_days: float = 8.0,
                 max_log_bytes: int = MAX_LOG_BYTES) -> None:
        self.state_dir = state_dir
        self.max_log_bytes = max_log_bytes
        self.results_dir = state_dir / RESULTS_DIR
        self.results_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.fsync = fsync
        self.keep_s = keep_days * 86400.0
        self._puts = 0
        self.prune()

    def _path(self, command_id: str) -> Path:
        return self.results_dir / f"{hashlib.sha256(command_id.encode()).hexdigest()}.json"

    def get(self, command_id: str) -> CommandResult | None:
        path = self._path(command_id)
        try:
            result = CommandResult.model_validate_json(path.read_bytes())
        except FileNotFoundError:
            return None
        except ValidationError:
            # Writes are atomic, so only a damaged disk gets here. Moving the file aside and
            # running the command again (its steps are idempotent) beats blocking the node's
            # queue forever on a result that cannot be read.
            os.replace(path, path.with_suffix(".corrupt"))
            log.error("stored result unreadable; moved aside, the command will run again",
                      extra={"command_id": command_id, "file": str(path)})
            return None
        return result if result.command_id == command_id else None

    def put(self, result: CommandResult) -> None:
        data = result.model_copy(update={"replayed": False}).to_bytes()
        write_atomic(self._path(result.command_id), data, 0o600, fsync=self.fsync)
        self._puts += 1
        if self._puts % PRUNE_EVERY == 0:
            self.prune()

    def record_execution(self, record: ExecutionRecord) -> None:
        line = json.dumps(asdict(record), separators=(",", ":")) + "\n"
        path = self.state_dir / EXECUTIONS_FILE
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        if os.fstat(fd).st_size + len(line) > self.max_log_bytes > 0:
            os.close(fd)
            os.replace(path, path.with_name(EXECUTIONS_FILE + ROTATED_SUFFIX))
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, line.encode())  # one write of one line with O_APPEND: never interleaved
            if self.fsync:
                os.fsync(fd)
        finally:
            os.close(fd)

    def prune(self, now: float | None = None) -> int:
        """Remove results older than `keep_days`; return how many were removed."""
        cutoff = (time.time() if now is None else now) - self.keep_s
        removed = 0
        for entry in os.scandir(self.results_dir):
            try:
                if entry.stat().st_mtime < cutoff:
                    os.unlink(entry.path)
                    removed += 1
            except FileNotFoundError:
                continue
        return removed


def read_executions(state_dir: Path) -> list[ExecutionRecord]:
    """Every line of the executions log, the rotated generation first (none if the agent never
    ran a command)."""
    out = []
    for name in (EXECUTIONS_FILE + ROTATED_SUFFIX, EXECUTIONS_FILE):
        try:
            text = (state_dir / name).read_text()
        except FileNotFoundError:
            continue
        out += [ExecutionRecord(**json.loads(line)) for line in text.splitlines() if line.strip()]
    return out


def execution_counts(state_dir: Path) -> Counter[str]:
    """How often each command id really ran; every count must be 1."""
    return Counter(r.commandId for r in read_executions(state_dir))
