"""What the agent has done, on disk: the stored result of every completed command, and a log
of real executions.

Why: JetStream delivers at least once. A command is acked only after its result is stored
here and published, so a crash anywhere before the ack means a redelivery; the agent then
finds the stored result and answers it again (`replayed=True`) without running anything.

    <state>/results/<sha256(key)>.json          {"expiresAt": <the command's>, "result": <the
                                                CommandResult>}, written atomically (temp file +
                                                fsync + rename + fsync of the dir); the key is the
                                                command id, preceded by the cluster's incarnation
                                                for a bound command (bke.core.secrets.binding): a
                                                cluster made again under the same name reuses
                                                command ids, and must not be answered with the
                                                results of the one deleted
    <state>/executions.jsonl                    one line per real execution that completed:
                                                {"commandId", "phase", "cluster", "node",
                                                 "status", "startedAt", "finishedAt", "agentId"}

The executions log is what tests and the lab count to prove that no completed command ran
twice: a command id appears in it at most once. It is appended after the result is stored,
so a crash between the two loses one line rather than ever showing a replay as a run.

Pruning goes by each command's own validity, not by the file's age: a result is removed once
its command expired more than EXPIRED_KEPT_S ago. From then on a replay of that command is
refused as expired (verify.py, by the same clock), so forgetting the result can never let it
run twice; the day past the expiry covers a clock stepped back. A result stored before entries
named their expiry (a bare CommandResult) is pruned when its file is older than `keep_days`,
at least the validity and that day. The log rotates once it would pass `max_log_bytes` (to
`executions.jsonl.1`, replacing the older one): periodic health checks run commands for as long
as the node lives, so it must not grow forever.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import time
from collections import Counter
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Protocol

from pydantic import ValidationError

from bke.contracts.agent import COMMAND_VALIDITY_S, CommandResult

from .fsutil import write_atomic

__all__ = [
    "DiskJournal",
    "ExecutionRecord",
    "Journal",
    "MemoryJournal",
    "execution_counts",
    "journal_key",
    "read_executions",
]

RESULTS_DIR = "results"
EXECUTIONS_FILE = "executions.jsonl"
ROTATED_SUFFIX = ".1"
MAX_LOG_BYTES = 16 * 1024 * 1024  # ~40,000 executions per generation; two generations on disk
PRUNE_EVERY = 500  # puts between two prunes
EXPIRED_KEPT_S = 86400.0  # how long a result outlives its command's expiry
_ENTRY_HEAD = b'{"expiresAt":"'
_EXPIRY = re.compile(rb'^\{"expiresAt":"([^"]*)"')
log = logging.getLogger("bke.agent.journal")


def journal_key(command_id: str, incarnation: str = "") -> str:
    """What a result is kept under: its command id, within the cluster's incarnation."""
    return f"{incarnation}\n{command_id}" if incarnation else command_id


def _entry(result: CommandResult, expires_at: str) -> bytes:
    return _ENTRY_HEAD + json.dumps(expires_at)[1:-1].encode() + b'","result":' + result.to_bytes() + b"}"


def _read_entry(raw: bytes) -> CommandResult:
    """The result in a stored entry (or in a bare CommandResult, stored before entries)."""
    if raw.startswith(_ENTRY_HEAD):
        doc = json.loads(raw)
        if not isinstance(doc, dict):
            raise ValueError("not an entry")
        return CommandResult.model_validate(doc.get("result"))
    return CommandResult.model_validate_json(raw)


def _expiry(head: bytes) -> float | None:
    """The expiry (epoch seconds) at the head of a stored entry; None for a bare result or one
    without a readable expiry."""
    m = _EXPIRY.match(head)
    if m is None:
        return None
    try:
        at = datetime.fromisoformat(m.group(1).decode())
    except (ValueError, UnicodeDecodeError):
        return None
    return (at if at.tzinfo is not None else at.replace(tzinfo=timezone.utc)).timestamp()


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
    """Where completed results and the executions log are kept. `incarnation`: the cluster's,
    as the command names it ("" for an unbound command); `expires_at`: the command's."""

    def get(self, command_id: str, incarnation: str = "") -> CommandResult | None: ...

    def put(self, result: CommandResult, *, incarnation: str = "", expires_at: str = "") -> None: ...

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

    def get(self, command_id: str, incarnation: str = "") -> CommandResult | None:
        raw = self.results.get(journal_key(command_id, incarnation))
        return None if raw is None else CommandResult.model_validate_json(raw)

    def put(self, result: CommandResult, *, incarnation: str = "", expires_at: str = "") -> None:
        self.results[journal_key(result.command_id, incarnation)] = result.to_bytes()

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
        # for bare results only (their command's expiry is not stored): never less than a
        # command's validity and the day past it
        self.keep_s = max(keep_days * 86400.0, COMMAND_VALIDITY_S + EXPIRED_KEPT_S)
        self._puts = 0
        self.prune()

    def _path(self, command_id: str, incarnation: str = "") -> Path:
        key = journal_key(command_id, incarnation)
        return self.results_dir / f"{hashlib.sha256(key.encode()).hexdigest()}.json"

    def get(self, command_id: str, incarnation: str = "") -> CommandResult | None:
        path = self._path(command_id, incarnation)
        try:
            result = _read_entry(path.read_bytes())
        except FileNotFoundError:
            return None
        except (ValidationError, ValueError):
            # Writes are atomic, so only a damaged disk gets here. Moving the file aside and
            # running the command again (its steps are idempotent) beats blocking the node's
            # queue forever on a result that cannot be read.
            os.replace(path, path.with_suffix(".corrupt"))
            log.error("stored result unreadable; moved aside, the command will run again",
                      extra={"command_id": command_id, "file": str(path)})
            return None
        return result if result.command_id == command_id else None

    def put(self, result: CommandResult, *, incarnation: str = "", expires_at: str = "") -> None:
        data = _entry(result.model_copy(update={"replayed": False}), expires_at)
        write_atomic(self._path(result.command_id, incarnation), data, 0o600, fsync=self.fsync)
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
        """Remove the results whose command expired more than EXPIRED_KEPT_S ago (bare ones:
        older than `keep_days`); return how many were removed."""
        at = time.time() if now is None else now
        removed = 0
        for entry in os.scandir(self.results_dir):
            try:
                expires = None
                if entry.name.endswith(".json"):  # not one moved aside (.corrupt)
                    with open(entry.path, "rb") as f:
                        expires = _expiry(f.read(96))
                gone = (expires + EXPIRED_KEPT_S < at) if expires is not None else entry.stat().st_mtime < at - self.keep_s
                if gone:
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
