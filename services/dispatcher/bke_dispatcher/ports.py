"""What the install and the operations are given from outside the dispatcher's core, as protocols:
the binaries' checksums (the httpRepo's, read through the cluster API side) and the phases' own
work in the dispatcher (local_work.py). The wiring hands in the real ones; tests their own."""
from __future__ import annotations

from typing import Protocol

from bke.adapters.runner import Outcome
from bke.core.plan import Plan

__all__ = ["Checksums", "LocalWork"]


class Checksums(Protocol):
    async def for_plan(self, plan: Plan) -> dict[str, str]: ...


class LocalWork(Protocol):
    async def run(self, name: str, plan: Plan) -> Outcome: ...
