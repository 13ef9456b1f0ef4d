"""Where binary checksums come from: the httpRepo's `<file>.sha256` (as dl.k8s.io lays them
out), or, in the lab, the placeholder the lab agent writes in place of a download."""
from __future__ import annotations

import httpx

from bke.errors import TemporaryError
from bke.binary_placeholder import lab_binary_sha256
from bke.plan import Plan

from .steps import BINARIES

__all__ = ["HttpRepoChecksums", "LabChecksums"]


def _urls(plan: Plan) -> dict[str, str]:
    c = plan.spec.config
    repo = c.http_repo.rstrip("/")
    versions = {"containerd": c.containerd_version, "kubelet": c.kubernetes_version, "kubectl": c.kubernetes_version}
    return {name: f"{repo}/{name}/{versions[name]}/linux/amd64/{name}" for name in BINARIES}


class LabChecksums:
    async def for_plan(self, plan: Plan) -> dict[str, str]:
        return {name: lab_binary_sha256(url) for name, url in _urls(plan).items()}


class HttpRepoChecksums:
    def __init__(self) -> None:
        self._cache: dict[str, str] = {}

    async def for_plan(self, plan: Plan) -> dict[str, str]:
        out = {}
        async with httpx.AsyncClient(timeout=10.0, trust_env=False) as client:
            for name, url in _urls(plan).items():
                if url not in self._cache:
                    try:
                        resp = await client.get(url + ".sha256")
                        resp.raise_for_status()
                    except httpx.HTTPError as exc:
                        raise TemporaryError(f"cannot read checksum {url}.sha256: {exc}", delay=10.0) from exc
                    self._cache[url] = resp.text.split()[0].strip().lower()
                out[name] = self._cache[url]
        return out
