"""The lab's addon manifests: no httpRepo, so the calico stand-in, checked against its own digest
like a download (bke.adapters.cluster_api.manifests.HttpRepoManifests in a real cluster)."""
from __future__ import annotations

from bke.adapters.cluster_api.manifests import verify_manifest
from bke.core.artefacts import Artefact
from bke.core.plan import Plan

from .calico_placeholder import lab_calico_manifest, lab_calico_sha256

__all__ = ["LabManifests"]


class LabManifests:
    """No httpRepo in the lab: the stand-in, checked against its own digest like a download."""

    async def fetch(self, plan: Plan, art: Artefact) -> bytes:
        url = art.url(plan.spec.config.http_repo)
        return verify_manifest(url, lab_calico_manifest(art.version), lab_calico_sha256(art.version))
