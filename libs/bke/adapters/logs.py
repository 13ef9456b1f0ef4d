"""Structured logs: one JSON object per line, with the cluster/node/operation ids when known.

Handlers pass ids through `extra={...}`; this formatter keeps them as fields.

Repeated warnings and errors are rate-limited (`RepeatLimiter`): a flood of one failure (a
thousand forged results, an outage retried every second) once grew a service's log by 48 MB in
four minutes. The first `burst` lines of one kind per `interval` pass; the rest are counted, and
the next line of that kind to pass says how many were left out.
"""
from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import Callable

__all__ = ["RepeatLimiter", "setup_logging", "JsonFormatter"]

_STD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    def __init__(self, service: str):
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        doc = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname,
            "service": self.service,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        doc.update({k: v for k, v in vars(record).items() if k not in _STD and not k.startswith("_")})
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str)


class RepeatLimiter(logging.Filter):
    """Lets through at most `burst` records of one kind per `interval` seconds, for WARNING and
    above (INFO lines are the operations' progress and are never dropped).

    A record's kind is its logger, level and message template (not the formatted text: the
    arguments differ line by line), plus its `rate_key` extra if it has one (else its `subject`).
    When a kind's window ends with records left out, the next record of that kind passes with
    `suppressed=<count>` and the count in its message. `clock` is injected for tests."""

    def __init__(self, burst: int = 5, interval: float = 60.0, clock: Callable[[], float] = time.monotonic,
                 max_kinds: int = 10_000):
        super().__init__()
        self.burst, self.interval, self.clock, self.max_kinds = burst, interval, clock, max_kinds
        self._windows: dict[tuple, list] = {}  # kind -> [window start, passed, suppressed]

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        key = (record.name, record.levelno, str(record.msg),
               getattr(record, "rate_key", None) or getattr(record, "subject", None))
        now = self.clock()
        win = self._windows.get(key)
        if win is None or now - win[0] >= self.interval:
            left_out = win[2] if win is not None else 0
            if win is None and len(self._windows) >= self.max_kinds:
                self._windows.clear()  # bounded memory: forget old kinds rather than grow
            self._windows[key] = [now, 1, 0]
            if left_out:
                record.suppressed = left_out
                record.msg = f"{record.msg} ({left_out} similar lines left out in the last {self.interval:.0f} s)"
            return True
        if win[1] < self.burst:
            win[1] += 1
            return True
        win[2] += 1
        return False


def setup_logging(service: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(service))
    handler.addFilter(RepeatLimiter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(os.environ.get("BKE_LOG_LEVEL", "INFO"))
