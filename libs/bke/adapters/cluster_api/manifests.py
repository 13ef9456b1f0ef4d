"""Where fetched addon manifests (the CNI's) come from: the httpRepo, checked against the
`.sha256` beside each file (and the versions table's pin when there is one); in the lab, the
calico stand-in, checked the same way (bke.lab.standins.manifests).

Errors: an unreachable httpRepo or a server error is a TemporaryError (the runner comes back); a
file the httpRepo does not have (404) or a checksum that does not match is a ValueError (the
addons phase fails with the URL, and `bke retry` resumes once the httpRepo is fixed).
"""
from __future__ import annotations

import hashlib
from dataclasses import replace

import httpx

from bke.core.artefacts import Artefact, cluster_artefacts, tree_sha256
from bke.core.errors import TemporaryError
from bke.core.plan import Plan
from bke.core.versions import KUBERNETES, parse_version

__all__ = ["HttpRepoManifests", "cni_artefact", "verify_manifest"]

MAX_MANIFEST_BYTES = 16 * 1024 * 1024  # calico.yaml is about 0.3 MB; anything far bigger is not it


def cni_artefact(plan: Plan, version: str) -> Artefact:
    """The CNI manifest's artefact (bke.core.artefacts), at the version the addon step asks for."""
    found = cluster_artefacts(plan.spec.config)
    if not found:
        raise ValueError("the cluster has no CNI to fetch (cni: none)")
    return replace(found[0], version=version.lstrip("v"))


def _pinned(plan: Plan, art: Artefact) -> str:
    row = KUBERNETES.get(parse_version(plan.kubernetes_version).minor_key)
    return row.calico_sha256 if row is not None and row.calico == art.version else ""


def verify_manifest(url: str, body: bytes, published: str, pinned: str = "") -> bytes:
    """`body` if its sha256 matches the published one (and the pin, if any); else ValueError."""
    digest = hashlib.sha256(body).hexdigest()
    for what, want in (("its .sha256", published), ("the versions table's pin", pinned)):
        if want and digest != want.lower():
            raise ValueError(f"{url}: sha256 {digest} does not match {what} ({want})")
    return body


class HttpRepoManifests:
    async def fetch(self, plan: Plan, art: Artefact) -> bytes:
        url = art.url(plan.spec.config.http_repo)
        async with httpx.AsyncClient(timeout=30.0, trust_env=False) as client:
            try:
                sums = await client.get(url + ".sha256")
                sums.raise_for_status()
                resp = await client.get(url)
                resp.raise_for_status()
            except httpx.HTTPStatusError as exc:
                if exc.response.status_code == 404:  # asking again will not help: say what is missing
                    raise ValueError(f"{exc.request.url} is not in the httpRepo (404): add it (`bke bundle build`), "
                                     "then `bke retry`") from exc
                raise TemporaryError(f"cannot fetch {url}: {exc}", delay=10.0) from exc
            except httpx.HTTPError as exc:
                raise TemporaryError(f"cannot fetch {url}: {exc}", delay=10.0) from exc
        if len(resp.content) > MAX_MANIFEST_BYTES:
            raise ValueError(f"{url}: {len(resp.content)} bytes, more than a manifest ({MAX_MANIFEST_BYTES})")
        published = tree_sha256(sums.text, f"{url}.sha256")
        return verify_manifest(url, resp.content, published, _pinned(plan, art))
