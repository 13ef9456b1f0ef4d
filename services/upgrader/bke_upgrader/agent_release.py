"""The agent release an upgrade installs on every node (`BKE_UPGRADER_AGENT_RELEASE`): a bundle
built by `bke bundle build`, as its httpRepo URL or its directory (reachable at the same path
on the nodes: the lab's case).

Read from the bundle's index (`bundle.json`, written last, so a bundle still being built is
refused): its `agent.dir` (`agent/<version>`, which names the version) and every wheel under it
with the sha256 the index records (`files`), so the agent checks each wheel it downloads.

Each node is sent only the wheels its Python and platform install (bke_upgrader.wheel_tags),
from the runtime its agent's heartbeats report, as the dispatcher tells it (the agents' facts,
bke_upgrader.agent_facts; no answer is a retryable error). A node whose agent reported none (an agent older than that report, or none of its
heartbeats recorded yet), or for which some distribution has no wheel, fails its step saying
so, and nothing is sent to it: every wheel of every Python and arch would not do, since the
agent installs the files it is given and pip refuses one of another platform.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bke.contracts.agent import AgentRuntime
from bke.contracts.agent_steps import AgentWheel, UpdateAgent

from .agent_facts import AgentFactsClient
from .wheel_tags import WheelSetError, select_wheels

__all__ = ["AgentRelease", "NodeUpdates", "ReleaseError", "ReleaseSource", "load_release", "release_from",
           "node_updates"]

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


@dataclass(frozen=True)
class NodeUpdates:
    """The agents step's UpdateAgent for each node: `steps[host]`, or `errors[host]` (why that
    node has none: its step fails with it)."""

    steps: dict[str, UpdateAgent]
    errors: dict[str, str]

    def refusal(self, most: int = 3) -> str:
        """The reason of the first `most` nodes without a step ("" when every node has one)."""
        bad = sorted(self.errors)
        more = f" (and {len(bad) - most} more node(s))" if len(bad) > most else ""
        return "; ".join(f"{h}: {self.errors[h]}" for h in bad[:most]) + more

    def step(self, host: str) -> UpdateAgent:
        if host in self.errors:
            raise ReleaseError(self.errors[host])
        return self.steps[host]


def node_updates(release: AgentRelease, runtimes: dict[str, AgentRuntime | None], confirm_timeout_s: float
                 ) -> NodeUpdates:
    """Pure: per host, UpdateAgent with the wheels its runtime installs, or why there is none
    (a runtime not known: None)."""
    steps, errors = {}, {}
    for host, rt in runtimes.items():
        if rt is None:
            errors[host] = (f"the agent release {release.version}: the node's agent has not reported its Python and "
                            "platform (an agent older than that report, or no heartbeat of it recorded yet): "
                            "which wheels it installs is not known")
            continue
        try:
            wheels = select_wheels(release.wheels, rt)
        except WheelSetError as exc:
            errors[host] = f"the agent release {release.version}: {exc}"
            continue
        steps[host] = UpdateAgent(id="agents:update", version=release.version, wheels=list(wheels),
                                  confirm_timeout_s=confirm_timeout_s)
    return NodeUpdates(steps, errors)


class ReleaseSource:
    """The configured release, read once (a bundle's index does not change once written), and
    each node's runtime as its agent last reported it (`agents`: None, no runtime is known)."""

    def __init__(self, source: str, confirm_timeout_s: float = 120.0, agents: AgentFactsClient | None = None):
        self.source, self.confirm_timeout_s, self.agents = source, confirm_timeout_s, agents
        self._release: AgentRelease | None = None

    async def get(self) -> AgentRelease:
        if self._release is None:
            self._release = await load_release(self.source)
        return self._release

    async def runtimes(self, cluster: str, hosts: list[str]) -> dict[str, AgentRuntime | None]:
        if self.agents is None:
            return dict.fromkeys(hosts)
        return {h: f.runtime for h, f in (await self.agents.get(cluster, hosts)).items()}

    async def updates(self, cluster: str, hosts: list[str]) -> NodeUpdates:
        return node_updates(await self.get(), await self.runtimes(cluster, hosts), self.confirm_timeout_s)
