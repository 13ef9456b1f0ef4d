"""Quorum of an etcd cluster, sampled: a pure verdict on one sample, and an async sampler.

Why sampled from outside: a member-by-member roll is only safe if, at every moment, a majority
of the members runs, and any pause without a leader ends within an election. Two answers of each
member say so:

- its /health (etcd-io/etcd server/etcdserver/api/etcdhttp/metrics.go, v3.5.x `checkV3Health`;
  etcdserver/api/etcdhttp/metrics.go on the release-3.4 branch): true when it has no alarm, sees
  a leader, and a linearizable read through that leader succeeds;
- its status (`POST /v3/maintenance/status`, the gRPC gateway's JSON form on 3.4 and 3.5): the
  leader its raft follows, answered from the member's own state, and its server version.

A member counts toward quorum when it runs: its /health is true, its status names a leader, or
its /health answers at all. The last two matter while a leader moves (the rolled member was the
leader, and its stop hands leadership over): for a few milliseconds the members answer "no
leader" (503 RAFT NO LEADER, caught once in a real roll), then the linearizable read of /health
fails with "leader changed" on members that already follow the new leader. That is a pause in
service, not a loss of quorum: every member still runs. The sampler keeps it visible as a "dip"
(`dips`: runs of samples where fewer than a majority answered /health true), so a caller can
bound how long service paused. A loss of quorum is a majority that does not answer at all.

    verdict(sample, size) -> ""              quorum: a majority of the members running
                          -> "why not"       below quorum (names the members that are not)
"""
from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import httpx

from bke.core.plan.models import quorum

__all__ = ["Dip", "MemberEndpoints", "MemberSample", "QuorumSample", "QuorumSampler", "dips", "majority", "verdict"]

HEALTHY_BODY = '"health":"true"'


majority = quorum  # the sampler's word for it


@dataclass(frozen=True)
class MemberSample:
    name: str
    healthy: bool  # /health answered 200 with "health":"true"
    leader: int = 0  # the leader's member id in this member's status (0: none or not answered)
    version: str = ""  # the server version in its status ("" when not answered)
    error: str = ""  # why not healthy, as short as the answer allows
    answered: bool = False  # its /health answered at all (the member runs), whatever it said

    @property
    def in_quorum(self) -> bool:
        """A voting member that runs: /health true, a status that names a leader, or a /health
        answer at all ("no leader" for the instant a leader moves)."""
        return self.healthy or self.leader != 0 or self.answered


@dataclass(frozen=True)
class QuorumSample:
    at: float  # seconds on the sampler's clock (monotonic)
    members: tuple[MemberSample, ...]

    @property
    def healthy(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.members if m.healthy)

    @property
    def in_quorum(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.members if m.in_quorum)


def verdict(sample: QuorumSample, size: int) -> str:
    """"" when `sample` shows quorum for a cluster of `size` members, else why not."""
    need = majority(size)
    ok = sample.in_quorum
    if len(ok) >= need:
        return ""
    down = ", ".join(f"{m.name} ({m.error or 'not answering'})" for m in sample.members if not m.in_quorum)
    return f"{len(ok)} of {size} members up, {need} needed: {down}"


@dataclass(frozen=True)
class Dip:
    """Consecutive samples in which fewer than a majority answered /health true."""

    start: float  # the first such sample
    end: float  # the last such sample
    samples: int
    reason: str  # the first sample's unhealthy members and what they said


def dips(samples: Sequence[QuorumSample], size: int) -> list[Dip]:
    """Every run of samples with a majority not answering /health true, in order."""
    out: list[Dip] = []
    run: list[QuorumSample] = []
    for s in [*samples, None]:
        if s is not None and len(s.healthy) < majority(size):
            run.append(s)
            continue
        if run:
            first = run[0]
            why = ", ".join(f"{m.name} ({m.error or 'unhealthy'})" for m in first.members if not m.healthy)
            out.append(Dip(first.at, run[-1].at, len(run), why))
            run = []
    return out


@dataclass(frozen=True)
class MemberEndpoints:
    name: str
    health_url: str  # the member's /health (its metrics listener, plain HTTP in kubeadm's layout)
    client_url: str = ""  # its client URL, for /v3/maintenance/status ("" to skip leader/version)


class QuorumSampler:
    """Samples every member every `every_s` seconds while entered (`async with`); the samples
    are in `.samples` in order. Each sample asks all members at once, each within `timeout_s`."""

    def __init__(self, members: Sequence[MemberEndpoints], *, every_s: float = 0.1, timeout_s: float = 1.0,
                 client_tls: ssl.SSLContext | None = None, clock: Callable[[], float] = time.monotonic,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.members, self.every_s, self.timeout_s = tuple(members), every_s, timeout_s
        self.client_tls, self.clock, self.transport = client_tls, clock, transport
        self.samples: list[QuorumSample] = []
        self._task: asyncio.Task[None] | None = None
        self._http: httpx.AsyncClient | None = None

    async def __aenter__(self) -> "QuorumSampler":
        # client_tls: the cluster's CA and a client pair (etcd's client URLs require one); without
        # it the default verification applies, never none
        self._http = httpx.AsyncClient(verify=self.client_tls or True, trust_env=False, timeout=self.timeout_s,
                                       transport=self.transport)
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

    def dips(self) -> list[Dip]:
        return dips(self.samples, len(self.members))

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
        healthy, answered, error = False, False, ""
        try:
            r = await self._http.get(m.health_url)
            answered = True
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
        return MemberSample(name=m.name, healthy=healthy, leader=leader, version=version, error=error, answered=answered)
