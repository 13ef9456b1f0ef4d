"""The dispatcher's own work per phase (`Phase.local`): one object per name, chosen here, so
that the install knows none of them."""
from __future__ import annotations

from collections.abc import Mapping

from bke.adapters.runner import Outcome
from bke.core.plan import Plan

from .ports import LocalWork

__all__ = ["LocalPhases"]


class LocalPhases:
    def __init__(self, works: Mapping[str, LocalWork]):
        self.works = dict(works)

    async def run(self, name: str, plan: Plan) -> Outcome:
        work = self.works.get(name)
        if work is None:  # a phase table naming work nobody wired: a bug, said plainly
            return Outcome("failed", reason=f"no local work named {name!r} is wired into the dispatcher")
        return await work.run(name, plan)
