"""Downloads for `bke bundle build`: streamed to a file while hashed, never held in memory whole.

Why a protocol: the build core is tested against a loopback server (tests/integration/test_bundle_build.py
serves fake upstream artefacts); the same `HttpFetcher` runs there and against real upstreams.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Protocol

import httpx

__all__ = ["FetchError", "Fetcher", "HttpFetcher"]


class FetchError(RuntimeError):
    """A download that could not be done (HTTP status, connection); names the URL."""


class Fetcher(Protocol):
    def to_file(self, url: str, dest: Path) -> str:
        """Write the body at `url` to `dest` (created 0600); return its sha256 hex digest."""
        ...

    def text(self, url: str) -> str: ...


class HttpFetcher:
    def __init__(self, timeout_s: float = 60.0, transport: httpx.BaseTransport | None = None) -> None:
        # trust_env: a build machine behind a proxy (HTTPS_PROXY) is the common case for a bundle
        self._client = httpx.Client(timeout=timeout_s, follow_redirects=True, transport=transport, trust_env=True)

    def close(self) -> None:
        self._client.close()

    def to_file(self, url: str, dest: Path) -> str:
        h = hashlib.sha256()
        try:
            with self._client.stream("GET", url) as resp:
                if resp.status_code != 200:
                    raise FetchError(f"GET {url}: HTTP {resp.status_code}")
                fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
                with os.fdopen(fd, "wb") as f:
                    for chunk in resp.iter_bytes(1 << 20):
                        h.update(chunk)
                        f.write(chunk)
        except httpx.HTTPError as exc:
            raise FetchError(f"GET {url}: {type(exc).__name__}: {exc}") from None
        return h.hexdigest()

    def text(self, url: str) -> str:
        try:
            resp = self._client.get(url)
        except httpx.HTTPError as exc:
            raise FetchError(f"GET {url}: {type(exc).__name__}: {exc}") from None
        if resp.status_code != 200:
            raise FetchError(f"GET {url}: HTTP {resp.status_code}")
        return resp.text
