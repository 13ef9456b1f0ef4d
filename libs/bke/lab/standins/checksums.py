"""The lab's checksums: the placeholder's, for every artefact some node of the plan fetches, in
place of the httpRepo's `<url>.sha256` (bke.adapters.checksums.HttpRepoChecksums)."""
from __future__ import annotations

from bke.adapters.checksums import artefact_urls
from bke.core.plan import Plan

from .binary_placeholder import lab_binary_sha256

__all__ = ["LabChecksums"]


class LabChecksums:
    async def for_plan(self, plan: Plan) -> dict[str, str]:
        return {url: lab_binary_sha256(url) for url in artefact_urls(plan)}
