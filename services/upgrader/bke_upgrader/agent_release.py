"""The agent release an upgrade installs on every node (`BKE_UPGRADER_AGENT_RELEASE`): a bundle
built by `bke bundle build`, as its httpRepo URL or its directory (reachable at the same path
on the nodes: the lab's case).

Read from the bundle's index (`bundle.json`, written last, so a bundle still being built is
refused): its `agent.dir` (`agent/<version>`, which names the version) and every wheel under it
with the sha256 the index records (`files`), so the agent checks each wheel it downloads.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bke.contracts.agent import AgentWheel

__all__ = ["AgentRelease", "ReleaseError", "ReleaseSource", "load_release", "release_from"]

INDEX = "bundle.json"
_AGENT_DIR = re.compile(r"^agent/(?P<version>[0-9]+\.[0-9]+\.[0-9]+([.+-][0-9A-Za-z.+-]+)?)$")


class ReleaseError(ValueError):
    """The release cannot be read or is incomplete; the message names what is missing."""


@dataclass(frozen=True)
class AgentRelease:
    version: str
    wheels: tuple[AgentWheel, ...]


def release_from(index: Any, base: str) -> AgentRelease:
    """Pure: the release a bundle index describes, its wheels under `base` (URL or path)."""
    agent = index.get("agent") if isinstance(index, dict) else None
    m = _AGENT_DIR.match(str(agent.get("dir", ""))) if isinstance(agent, dict) else None
    if m is None:
        raise ReleaseError(f"{base}/{INDEX}: the bundle has no agent (built without its wheels?)")
    prefix = m[0] + "/"
    wheels = [f for f in index.get("files", []) if str(f.get("path", "")).startswith(prefix)
              and str(f["path"]).endswith(".whl")]
    if not any(re.match(r"^bke-", Path(f["path"]).name) for f in wheels):
        raise ReleaseError(f"{base}/{INDEX}: no bke wheel under {prefix}")
    out = tuple(AgentWheel(url=f"{base.rstrip('/')}/{f['path']}", sha256=str(f["sha256"]))
                for f in sorted(wheels, key=lambda f: f["path"]))
    return AgentRelease(m["version"], out)


async def load_release(source: str, timeout_s: float = 30.0) -> AgentRelease:
    try:
        if source.startswith(("http://", "https://")):
            async with httpx.AsyncClient(trust_env=False, timeout=timeout_s) as client:
                r = await client.get(f"{source.rstrip('/')}/{INDEX}")
            if r.status_code != 200:
                raise ReleaseError(f"{source}/{INDEX}: HTTP {r.status_code}")
            return release_from(r.json(), source)
        root = Path(source).resolve()
        return release_from(json.loads((root / INDEX).read_text()), str(root))
    except (OSError, ValueError, httpx.HTTPError) as exc:
        if isinstance(exc, ReleaseError):
            raise
        raise ReleaseError(f"{source}: the agent release cannot be read: {type(exc).__name__}: {exc}") from None


class ReleaseSource:
    """The configured release, read once (a bundle's index does not change once written)."""

    def __init__(self, source: str, confirm_timeout_s: float = 120.0):
        self.source, self.confirm_timeout_s = source, confirm_timeout_s
        self._release: AgentRelease | None = None

    async def get(self) -> AgentRelease:
        if self._release is None:
            self._release = await load_release(self.source)
        return self._release
