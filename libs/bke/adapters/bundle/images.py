"""The container images a cluster pulls, and their digests from the source registry.

Why from the rendered files: the list is what the nodes will really pull (the static pods, the
built-in addons and containerd's sandbox image as the renderer writes them for this spec), plus
the images of the CNI's manifest as fetched into the bundle; nothing is listed from memory.

Each image has the reference the nodes pull (`ref`, under the spec's `imageRepo` for the
Kubernetes images) and the upstream reference to copy it from (`source`). The digest is read from
the source registry's manifest endpoint (Docker Registry HTTP API v2 / OCI distribution spec:
`HEAD /v2/<name>/manifests/<tag>` answers with `Docker-Content-Digest`), anonymously, following
the registry's Bearer token challenge (the token flow of the distribution spec) when it asks.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

import httpx
import yaml

from bke.core.calico import calico_image

__all__ = ["DEFAULT_REGISTRIES", "Image", "ImageError", "calico_images", "rendered_images", "resolve_digests",
           "split_ref"]

# Where each source registry's API is (docker.io's API host is not docker.io).
DEFAULT_REGISTRIES: dict[str, str] = {
    "registry.k8s.io": "https://registry.k8s.io",
    "docker.io": "https://registry-1.docker.io",
    "quay.io": "https://quay.io",
}
# Manifest media types asked for: a multi-arch index first, so the digest is the one that serves
# both arches (what `crane digest` / `docker buildx imagetools` report).
_ACCEPT = ", ".join((
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
))
_IMAGE_LINE = re.compile(r"^\s*(?:-\s+)?image:\s*[\"']?([^\s\"']+)[\"']?\s*$", re.M)
_SANDBOX = re.compile(r"^\s*sandbox(?:_image)?\s*=\s*\"([^\"]+)\"", re.M)


class ImageError(RuntimeError):
    """A digest that could not be read (names the image and the registry's answer)."""


@dataclass(frozen=True)
class Image:
    ref: str  # what the nodes pull, as rendered
    source: str  # where to copy it from
    digest: str | None = None

    def as_dict(self) -> dict[str, str | None]:
        return {"ref": self.ref, "source": self.source, "digest": self.digest}


def split_ref(ref: str) -> tuple[str, str, str]:
    """(registry host, repository path, tag) of a reference, with Docker's defaults."""
    name, _, tag = ref.rpartition(":") if ":" in ref.rsplit("/", 1)[-1] else (ref, "", "latest")
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        host, path = first, rest
    else:
        host, path = "docker.io", name
    if host == "docker.io" and "/" not in path:
        path = f"library/{path}"
    return host, path, tag


def _source_of(ref: str, image_repo: str) -> str:
    """The upstream reference of an image rendered under `imageRepo` (kubeadm's convention: CoreDNS
    is coredns/coredns on registry.k8s.io and plain coredns on a custom repository)."""
    repo = image_repo.rstrip("/")
    if repo == "registry.k8s.io" or not ref.startswith(repo + "/"):
        return ref
    rest = ref[len(repo) + 1:]
    if rest.startswith("coredns:"):
        rest = "coredns/" + rest
    return f"registry.k8s.io/{rest}"


def rendered_images(texts: Iterable[str], image_repo: str) -> list[Image]:
    """Every `image:` of the rendered manifests and containerd's sandbox image, once each, sorted."""
    refs: set[str] = set()
    for text in texts:
        refs.update(_IMAGE_LINE.findall(text))
        refs.update(_SANDBOX.findall(text))
    return [Image(r, _source_of(r, image_repo)) for r in sorted(refs)]


def calico_images(manifest: str, image_repo: str = "registry.k8s.io") -> list[Image]:
    """The images of calico.yaml's workloads (containers and init containers of every object):
    pulled where the addons phase has the nodes pull them (`bke.core.calico.calico_image`),
    copied from the manifest's reference."""
    refs: set[str] = set()
    for doc in yaml.safe_load_all(manifest):
        pod = ((doc or {}).get("spec") or {}).get("template", {}).get("spec") or {}
        for c in (pod.get("initContainers") or []) + (pod.get("containers") or []):
            if c.get("image"):
                refs.add(c["image"])
    return [Image(calico_image(image_repo, r), r) for r in sorted(refs)]


def _token(client: httpx.Client, challenge: str, where: str) -> str:
    m = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
    if not challenge.lower().startswith("bearer") or "realm" not in m:
        raise ImageError(f"{where}: the registry asks for {challenge!r}; only anonymous Bearer tokens are supported")
    params = {k: v for k, v in m.items() if k in ("service", "scope")}
    resp = client.get(m["realm"], params=params)
    if resp.status_code != 200:
        raise ImageError(f"{where}: token endpoint {m['realm']}: HTTP {resp.status_code}")
    body = resp.json()
    return str(body.get("token") or body.get("access_token") or "")


def resolve_digests(images: Iterable[Image], registries: Mapping[str, str] | None = None,
                    transport: httpx.BaseTransport | None = None, timeout_s: float = 30.0) -> list[Image]:
    """Each image with the digest its source registry reports for the tag (errors name the image)."""
    table = {**DEFAULT_REGISTRIES, **(registries or {})}
    out = []
    with httpx.Client(timeout=timeout_s, transport=transport, follow_redirects=True, trust_env=True) as client:
        for img in images:
            host, path, tag = split_ref(img.source)
            base = table.get(host, f"https://{host}").rstrip("/")
            url = f"{base}/v2/{path}/manifests/{tag}"
            where = f"image {img.source} (HEAD {url})"
            try:
                resp = client.head(url, headers={"Accept": _ACCEPT})
                if resp.status_code == 401 and "www-authenticate" in resp.headers:
                    token = _token(client, resp.headers["www-authenticate"], where)
                    resp = client.head(url, headers={"Accept": _ACCEPT, "Authorization": f"Bearer {token}"})
            except httpx.HTTPError as exc:
                raise ImageError(f"{where}: {type(exc).__name__}: {exc}") from None
            digest = resp.headers.get("docker-content-digest", "")
            if resp.status_code != 200 or not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
                raise ImageError(f"{where}: HTTP {resp.status_code}, Docker-Content-Digest {digest or 'missing'}")
            out.append(replace(img, digest=digest))
    return out
