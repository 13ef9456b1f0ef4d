"""Where binary checksums come from: the httpRepo's `<url>.sha256` beside each artefact (as
dl.k8s.io lays them out, and `bke bundle build` writes them), or, in the lab, the placeholder the
lab agent writes in place of a download. Both answer for every artefact some node of the plan
fetches (steps.plan_artefacts), keyed by the artefact's URL: an arm64 node's containerd is another
URL, and another checksum, than an amd64 node's."""
from __future__ import annotations

import httpx

from bke.core.artefacts import tree_sha256
from bke.core.errors import TemporaryError
from bke.core.plan import Plan

from bke.core.node_steps import plan_artefacts

__all__ = ["HttpRepoChecksums", "artefact_urls"]


def artefact_urls(plan: Plan) -> list[str]:
    repo = plan.spec.config.http_repo
    return [a.url(repo) for a in plan_artefacts(plan)]


class HttpRepoChecksums:
    """Reads each `<url>.sha256` once per process (an artefact's URL names its version, so its
    checksum never changes); an unreadable one is a retry later, not a failure."""

    def __init__(self, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self._cache: dict[str, str] = {}
        self._transport = transport

    async def for_plan(self, plan: Plan) -> dict[str, str]:
        urls = artefact_urls(plan)
        missing = [u for u in urls if u not in self._cache]
        if missing:
            async with httpx.AsyncClient(timeout=10.0, trust_env=False, transport=self._transport) as client:
                for url in missing:
                    try:
                        resp = await client.get(url + ".sha256")
                        resp.raise_for_status()
                    except httpx.HTTPError as exc:
                        raise TemporaryError(f"cannot read checksum {url}.sha256: {exc}", delay=10.0) from exc
                    try:
                        self._cache[url] = tree_sha256(resp.text, f"{url}.sha256")
                    except ValueError:
                        raise TemporaryError(f"{url}.sha256 holds no sha256 ({resp.text[:80]!r})", delay=10.0) from None
        return {u: self._cache[u] for u in urls}
