"""Quorum of an etcd cluster, sampled: a pure verdict on one sample, and an async sampler.

Why sampled from outside: a member-by-member roll is only safe if, at every moment, a majority
of the members is healthy. Each member's /health answers true only while that member sees a
leader and can serve a read (etcd server/etcdserver/api/etcdhttp/metrics.go at v3.4.23 and
health.go at v3.5.1: `checkHealth` -> "no leader" / "raft alarm"), so "a majority answers
/health true" is "the cluster has quorum" as a client sees it. The member's own status
(`/v3/maintenance/status`, the gRPC gateway's JSON form, present on 3.4 and 3.5) adds which
leader it follows and its server version, recorded with the sample for the report.

    verdict(sample, size) -> ""              quorum: a majority healthy, each with a leader
                          -> "why not"       below quorum (names the members that are not)

The sampler keeps every sample; `QuorumSampler.below()` lists the bad ones with their reason.
"""
from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import httpx

__all__ = ["MemberEndpoints", "MemberSample", "QuorumSample", "QuorumSampler", "majority", "verdict"]

HEALTHY_BODY = '"health":"true"'


def majority(size: int) -> int:
    """Members needed for quorum (raft: a strict majority)."""
    return size // 2 + 1


@dataclass(frozen=True)
class MemberSample:
    name: str
    healthy: bool  # /health answered 200 with "health":"true"
    leader: int = 0  # the leader's member id in this member's status (0: none or not answered)
    version: str = ""  # the server version in its status ("" when not answered)
    error: str = ""  # why not healthy, as short as the answer allows


@dataclass(frozen=True)
class QuorumSample:
    at: float  # seconds on the sampler's clock (monotonic)
    members: tuple[MemberSample, ...]

    @property
    def healthy(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.members if m.healthy)


def verdict(sample: QuorumSample, size: int) -> str:
    """"" when `sample` shows quorum for a cluster of `size` members, else why not."""
    need = majority(size)
    ok = sample.healthy
    if len(ok) >= need:
        return ""
    down = ", ".join(f"{m.name} ({m.error or 'unhealthy'})" for m in sample.members if not m.healthy)
    return f"{len(ok)} of {size} members healthy, {need} needed: {down}"


@dataclass(frozen=True)
class MemberEndpoints:
    name: str
    health_url: str  # the member's /health (its metrics listener, plain HTTP in kubeadm's layout)
    client_url: str = ""  # its client URL, for /v3/maintenance/status ("" to skip leader/version)


class QuorumSampler:
    """Samples every member every `every_s` seconds while entered (`async with`); the samples
    are in `.samples` in order. Each sample asks all members at once, each within `timeout_s`."""

    def __init__(self, members: Sequence[MemberEndpoints], *, every_s: float = 0.1, timeout_s: float = 1.0,
                 client_tls: ssl.SSLContext | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.members, self.every_s, self.timeout_s = tuple(members), every_s, timeout_s
        self.client_tls, self.clock = client_tls, clock
        self.samples: list[QuorumSample] = []
        self._task: asyncio.Task[None] | None = None
        self._http: httpx.AsyncClient | None = None

    async def __aenter__(self) -> "QuorumSampler":
        self._http = httpx.AsyncClient(verify=self.client_tls or False, trust_env=False, timeout=self.timeout_s)
        self._task = asyncio.create_task(self._run(), name="quorum-sampler")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    def below(self) -> list[tuple[QuorumSample, str]]:
        """Every sample below quorum, with the reason."""
        size = len(self.members)
        return [(s, why) for s in self.samples if (why := verdict(s, size))]

    def between(self, start: float, end: float) -> list[QuorumSample]:
        return [s for s in self.samples if start <= s.at <= end]

    async def _run(self) -> None:
        while True:
            started = self.clock()
            self.samples.append(await self.sample_once())
            # a fixed period, not a fixed pause: a slow answer does not stretch the next gap
            await asyncio.sleep(max(0.0, self.every_s - (self.clock() - started)))

    async def sample_once(self) -> QuorumSample:
        at = self.clock()
        members = await asyncio.gather(*(self._member(m) for m in self.members))
        return QuorumSample(at=at, members=tuple(members))

    async def _member(self, m: MemberEndpoints) -> MemberSample:
        assert self._http is not None, "sample inside `async with`"
        healthy, error = False, ""
        try:
            r = await self._http.get(m.health_url)
            healthy = r.status_code == 200 and HEALTHY_BODY in r.text.replace(" ", "")
            error = "" if healthy else f"HTTP {r.status_code} {r.text.strip()[:120]}"
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}"[:160]
        leader, version = 0, ""
        if m.client_url:
            try:
                r = await self._http.post(f"{m.client_url}/v3/maintenance/status", json={})
                if r.status_code == 200:
                    doc = r.json()
                    leader, version = int(doc.get("leader") or 0), str(doc.get("version") or "")
            except (httpx.HTTPError, ValueError):
                pass  # leader and version are for the report; health decides the verdict
        return MemberSample(name=m.name, healthy=healthy, leader=leader, version=version, error=error)
