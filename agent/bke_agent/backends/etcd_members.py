"""The etcd membership steps: `EtcdMemberAdd` (as a learner), `EtcdMemberPromote`, `EtcdMemberRemove`.

Why through the v3 Cluster API on etcd's gRPC gateway (`/v3/cluster/member/*`, JSON over the
member's client URL with the step's client certificate): that is how the snapshot step already
reaches a member (`snapshot`), no etcdctl has to be on the node, and the command carries values
only. A host and the lab differ only in reaching the member (the lab maps a loopback URL to the
node's address and reads TLS files under its root): each backend passes the URL and TLS context.

What etcd decides, and how the steps answer it (etcd v3.5, server/etcdserver/errors.go and
server/etcdserver/api/membership/errors.go; design: etcd's "Learner" document,
https://etcd.io/docs/v3.5/learning/design-learner/; procedure: the runtime reconfiguration
guide, https://etcd.io/docs/v3.5/op-guide/runtime-configuration/):
    add      a learner does not count towards the quorum, so adding one never risks it; etcd
             allows one learner at a time by default (`--experimental-max-learners=1`: "too many
             learner members in cluster"), which is a retryable `StepError` naming the learner;
    promote  refused while the learner is behind the leader ("can only promote a learner member
             which is in sync with leader", gRPC FailedPrecondition): asked again every `poll_s`
             until the step's deadline, then a `StepError` with etcd's last answer (a learner that
             never started never catches up: the message says to check it runs);
    remove   refused when it would leave too few started members ("re-configuration failed due to
             not enough started members", the strict reconfiguration check): a `StepError`.
Each step is idempotent by looking first (member list, linearizable): a member already added,
already voting or already gone is `Skipped`, saying what was found. Member ids are uint64,
which the gateway writes as decimal strings (proto3 JSON mapping).
"""
from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx

from bke.contracts.agent import EtcdMemberAdd, EtcdMemberPromote, EtcdMemberRemove, TlsFiles

from ..errors import PermanentStepError, StepError
from .base import StepOutcome

__all__ = ["EtcdMemberStepsMixin", "Member", "ensure_learner_added", "ensure_promoted", "ensure_removed"]

_CONNECT_S = 10.0
_REQUEST_S = 15.0
# etcd's own words (errors.go), matched on the gateway's error message
NOT_IN_SYNC = "in sync with leader"
TOO_MANY_LEARNERS = "too many learner members"
NOT_A_LEARNER = "can only promote a learner member"
NOT_FOUND = ("member not found", "ID not found", "ID removed")


@dataclass(frozen=True)
class Member:
    id: str  # uint64 as a decimal string
    name: str  # "" until the member has started and published its name
    peer_urls: tuple[str, ...]
    learner: bool

    def describe(self) -> str:
        kind = "learner" if self.learner else "voter"
        return f"{self.name or '(not started)'} id={int(self.id):x} {kind} {','.join(self.peer_urls)}"


class EtcdAnswer(StepError):
    """etcd answered an error (HTTP status and its message)."""

    def __init__(self, url: str, status: int, message: str) -> None:
        super().__init__(f"{url}: HTTP {status}: {message}")
        self.status, self.etcd_message = status, message


def _members(body: dict[str, Any]) -> list[Member]:
    return [Member(id=str(m.get("ID", "0")), name=str(m.get("name", "")),
                   peer_urls=tuple(str(u) for u in m.get("peerURLs") or ()), learner=bool(m.get("isLearner", False)))
            for m in body.get("members") or ()]


def _find(members: list[Member], name: str, peer_url: str) -> Member | None:
    """The member with this peer URL, else with this name (a removal may know either)."""
    return (next((m for m in members if peer_url in m.peer_urls), None)
            or next((m for m in members if m.name == name), None))


def _listing(members: list[Member]) -> str:
    return "".join(f"  {m.describe()}\n" for m in members)


class _Client:
    def __init__(self, client: httpx.AsyncClient, url: str) -> None:
        self.client, self.base = client, url.rstrip("/")

    async def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        url = f"{self.base}{path}"
        try:
            resp = await self.client.post(url, json=body)
        except httpx.HTTPError as exc:
            raise StepError(f"{url}: {type(exc).__name__}: {exc}") from None
        try:
            doc = resp.json()
        except ValueError:
            doc = {}
        doc = doc if isinstance(doc, dict) else {}
        if resp.status_code != 200:
            raise EtcdAnswer(url, resp.status_code, str(doc.get("message") or doc.get("error") or resp.text[:300]))
        return doc

    async def members(self) -> list[Member]:
        return _members(await self.post("/v3/cluster/member/list", {"linearizable": True}))

    async def asked_member_id(self) -> str:
        status = await self.post("/v3/maintenance/status", {})
        return str((status.get("header") or {}).get("member_id", ""))


def _client(verify: ssl.SSLContext | bool, transport: httpx.AsyncBaseTransport | None) -> httpx.AsyncClient:
    return httpx.AsyncClient(verify=verify, trust_env=False, transport=transport,
                             timeout=httpx.Timeout(_REQUEST_S, connect=_CONNECT_S))


async def ensure_learner_added(step: EtcdMemberAdd, url: str, verify: ssl.SSLContext | bool, *,
                               transport: httpx.AsyncBaseTransport | None = None) -> StepOutcome:
    async with _client(verify, transport) as http:
        etcd = _Client(http, url)
        members = await etcd.members()
        same_url = next((m for m in members if step.peer_url in m.peer_urls), None)
        same_name = next((m for m in members if m.name == step.member), None)
        if same_url is not None and same_url.name not in ("", step.member):
            raise PermanentStepError(f"{step.etcd_cluster}: peer URL {step.peer_url} belongs to member "
                                     f"{same_url.name}, not {step.member}; nothing was added")
        if same_url is None and same_name is not None:
            raise PermanentStepError(f"{step.etcd_cluster}: member {step.member} is listed with peer URLs "
                                     f"{','.join(same_name.peer_urls)}, not {step.peer_url}: remove it first; "
                                     "nothing was added")
        if same_url is not None:
            return StepOutcome("Skipped", stdout=f"{step.etcd_cluster}: {step.member} ({step.peer_url}) is already "
                                                 f"a member: {same_url.describe()}\nmembers:\n{_listing(members)}")
        try:
            body = await etcd.post("/v3/cluster/member/add", {"peerURLs": [step.peer_url], "isLearner": True})
        except EtcdAnswer as exc:
            if TOO_MANY_LEARNERS in exc.etcd_message:
                learners = ", ".join(m.describe() for m in members if m.learner)
                raise StepError(f"{step.etcd_cluster}: etcd takes one learner at a time and {learners} still is "
                                f"one (promote or remove it first); {step.member} was not added") from None
            raise
        added = _members({"members": [body.get("member") or {}]})[0]
        return StepOutcome(stdout=f"{step.etcd_cluster}: added {step.member} as a learner (id {int(added.id):x}, "
                                  f"peer {step.peer_url}); start it with --initial-cluster-state=existing\n"
                                  f"members:\n{_listing(_members(body))}")


async def ensure_promoted(step: EtcdMemberPromote, url: str, verify: ssl.SSLContext | bool, *,
                          transport: httpx.AsyncBaseTransport | None = None,
                          sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                          clock: Callable[[], float] = time.monotonic) -> StepOutcome:
    deadline = clock() + step.timeout_s
    async with _client(verify, transport) as http:
        etcd = _Client(http, url)
        tries, last = 0, ""
        while True:
            members = await etcd.members()
            m = _find(members, step.member, step.peer_url)
            if m is None:
                raise PermanentStepError(f"{step.etcd_cluster}: {step.member} ({step.peer_url}) is not a member; "
                                         "add it as a learner first")
            if not m.learner:
                what = f"promoted after {tries} request(s)" if tries else "already is a voting member"
                return StepOutcome("Succeeded" if tries else "Skipped",
                                   stdout=f"{step.etcd_cluster}: {step.member} {what}\nmembers:\n{_listing(members)}")
            tries += 1
            try:
                await etcd.post("/v3/cluster/member/promote", {"ID": m.id})
                continue  # listed again: the list shows it voting
            except EtcdAnswer as exc:
                if NOT_IN_SYNC in exc.etcd_message:
                    last = exc.etcd_message  # not caught up yet: ask again
                elif NOT_A_LEARNER in exc.etcd_message:
                    continue  # promoted meanwhile: the list says so
                else:
                    raise
            if clock() + step.poll_s > deadline:
                started = "" if m.name else (f"; {step.member} has never started (no name in the member list): "
                                             "check that its etcd runs and reaches the peers")
                raise StepError(f"{step.etcd_cluster}: learner {step.member} not promoted within {step.timeout_s:g}s "
                                f"({tries} requests); etcd's last answer: {last}{started}")
            await sleep(step.poll_s)


async def ensure_removed(step: EtcdMemberRemove, url: str, verify: ssl.SSLContext | bool, *,
                         transport: httpx.AsyncBaseTransport | None = None) -> StepOutcome:
    async with _client(verify, transport) as http:
        etcd = _Client(http, url)
        members = await etcd.members()
        m = _find(members, step.member, step.peer_url)
        if m is None:
            return StepOutcome("Skipped", stdout=f"{step.etcd_cluster}: {step.member} ({step.peer_url}) is not a "
                                                 f"member\nmembers:\n{_listing(members)}")
        if await etcd.asked_member_id() == m.id:
            # the member would stop serving as it applies its own removal: ask one that stays
            raise PermanentStepError(f"{step.etcd_cluster}: {url} is {step.member} itself; run the removal on a "
                                     "member that stays")
        try:
            body = await etcd.post("/v3/cluster/member/remove", {"ID": m.id})
        except EtcdAnswer as exc:
            if any(s in exc.etcd_message for s in NOT_FOUND):
                return StepOutcome("Skipped", stdout=f"{step.etcd_cluster}: {step.member} was removed meanwhile\n")
            raise
        return StepOutcome(stdout=f"{step.etcd_cluster}: removed {m.describe()}\nmembers:\n"
                                  f"{_listing(_members(body))}")


class EtcdMemberStepsMixin:
    """The three steps for a backend that says how it reaches a member (`etcd_endpoint`)."""

    http_transport: httpx.AsyncBaseTransport | None = None

    def etcd_endpoint(self, url: str, tls: TlsFiles | None) -> tuple[str, ssl.SSLContext | bool]:
        raise NotImplementedError

    async def etcd_member_add(self, step: EtcdMemberAdd) -> StepOutcome:
        url, verify = self.etcd_endpoint(step.endpoint, step.tls)
        return await ensure_learner_added(step, url, verify, transport=self.http_transport)

    async def etcd_member_promote(self, step: EtcdMemberPromote) -> StepOutcome:
        url, verify = self.etcd_endpoint(step.endpoint, step.tls)
        return await ensure_promoted(step, url, verify, transport=self.http_transport)

    async def etcd_member_remove(self, step: EtcdMemberRemove) -> StepOutcome:
        url, verify = self.etcd_endpoint(step.endpoint, step.tls)
        return await ensure_removed(step, url, verify, transport=self.http_transport)
