"""Where an agent remembers the newest cluster incarnation it took a bound command of (the rules
and why they are safe: bke.core.secrets.binding).

    <state>/served.json   {"agentId": "<key id>", "incarnation": "<id>"}, written atomically
                          (temp file + fsync + rename) only when it changes: once per install
                          of the cluster, not per command

It is written before the command runs: a crash while it runs leaves the agent remembering an
incarnation it took, which is what it would remember after the run. A file that cannot be read
is an agent that remembers nothing: it then takes the next bound command's incarnation, which is
the rule for an agent with a new key (the file's own key id is checked on every read).
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Protocol

from bke.core.secrets.binding import Served

from .fsutil import write_atomic

__all__ = ["DiskServed", "MemoryServed", "SERVED_FILE", "ServedMemory"]

SERVED_FILE = "served.json"
log = logging.getLogger("bke.agent.binding")


class ServedMemory(Protocol):
    def load(self) -> Served | None: ...

    def save(self, served: Served) -> None: ...


class MemoryServed:
    """For fleets of benchmark agents and unit tests: as long as the process lives."""

    def __init__(self, served: Served | None = None) -> None:
        self.served = served

    def load(self) -> Served | None:
        return self.served

    def save(self, served: Served) -> None:
        self.served = served


class DiskServed:
    """The real agent's, under its state directory; read once, then kept in memory."""

    def __init__(self, state_dir: Path, *, fsync: bool = True) -> None:
        self.path, self.fsync = state_dir / SERVED_FILE, fsync
        self._served = self._read()

    def _read(self) -> Served | None:
        try:
            doc = json.loads(self.path.read_bytes())
            return Served(str(doc["agentId"]), str(doc["incarnation"]))
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError):
            log.error("%s unreadable: the next bound command's incarnation is taken", self.path)
            return None

    def load(self) -> Served | None:
        return self._served

    def save(self, served: Served) -> None:
        doc = {"agentId": served.agent_id, "incarnation": served.incarnation}
        write_atomic(self.path, json.dumps(doc).encode(), 0o600, fsync=self.fsync)
        self._served = served
