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
             learner members in cluster"), a `StepError` naming the learner there is;
    promote  refused while the learner is behind the leader ("can only promote a learner member
             which is in sync with leader", gRPC FailedPrecondition): asked again (a learner that
             never started never catches up: the final message says to check that it runs);
    remove   refused when it would leave too few started members ("re-configuration failed due to
             not enough started members", the strict reconfiguration check): a `StepError`;
    any      "unhealthy cluster" (mayAddMember/mayRemoveMember, server.go) for about 5 s after the
             previous change, until the members have been connected long enough; and etcd's
             transient answers ("leader changed", "no leader", timeouts) or no answer at all:
             asked again (a lab run met "leader changed" on the first member list).
What is asked again is asked every `poll_s` until the step's `timeout_s`, then the step fails
with etcd's last answer and the number of requests.
Each step is idempotent by looking first (member list, linearizable): a member already added,
already voting or already gone is `Skipped`, saying what was found. Member ids are uint64,
which the gateway writes as decimal strings (proto3 JSON mapping).
"""
from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bke.contracts.agent_steps import EtcdMemberAdd, EtcdMemberPromote, EtcdMemberRemove, EtcdSnapshot, TlsFiles
from bke.contracts.statuses import StepResultStatus

from ..errors import PermanentStepError, StepError
from .base import StepOutcome
from .health import tls_verify
from .snapshot import SnapshotTaker

__all__ = ["EtcdMemberStepsMixin", "Member", "MemberStep", "ensure_member"]

_CONNECT_S = 10.0
_REQUEST_S = 15.0
# etcd's own words (errors.go), matched on the gateway's error message
NOT_IN_SYNC = "in sync with leader"
TOO_MANY_LEARNERS = "too many learner members"
NOT_A_LEARNER = "can only promote a learner member"
NOT_FOUND = ("member not found", "ID not found", "ID removed")
# mayAddMember/mayRemoveMember (server.go): refused until every voting member (add), or enough of
# them (remove), has been connected to the asked member for HealthInterval (5 s): right after
# the previous change, it passes by itself
UNHEALTHY = "unhealthy cluster"
# etcd's transient answers (errors.go: ErrLeaderChanged, ErrNoLeader, ErrTimeout*, ErrTooManyRequests):
# an election or a busy member, which any request may meet; asked again like the above
TRANSIENT = ("leader changed", "no leader", "request timed out", "too many requests")


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
    """etcd answered an error (HTTP status and its message), or did not answer (status 0)."""

    def __init__(self, url: str, status: int, message: str) -> None:
        super().__init__(f"{url}: HTTP {status}: {message}" if status else f"{url}: {message}")
        self.status, self.etcd_message = status, message


UNREACHABLE = "no answer"  # the asked member did not answer (restarting, busy): asked again


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
            raise EtcdAnswer(url, 0, f"{UNREACHABLE}: {type(exc).__name__}: {exc}") from None
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


@asynccontextmanager
async def _etcd(url: str, verify: ssl.SSLContext | bool, transport: httpx.AsyncBaseTransport | None) -> AsyncIterator[_Client]:
    """The member at `url`, for the length of one step."""
    async with httpx.AsyncClient(verify=verify, trust_env=False, transport=transport,
                                 timeout=httpx.Timeout(_REQUEST_S, connect=_CONNECT_S)) as http:
        yield _Client(http, url)


def _found(step: EtcdMemberAdd | EtcdMemberPromote | EtcdMemberRemove, acted: bool, what: str,
           members: list[Member]) -> StepOutcome:
    """The step's end: Succeeded if it changed the membership, Skipped if it found it done; what
    it found, then the member list."""
    return StepOutcome(StepResultStatus.SUCCEEDED if acted else StepResultStatus.SKIPPED,
                       stdout=f"{step.etcd_cluster}: {what}\nmembers:\n{_listing(members)}")


MemberStep = EtcdMemberAdd | EtcdMemberPromote | EtcdMemberRemove
# What a step does on the member list just read and the member it names there (`_find`; None: not
# listed): its end (a StepOutcome), or None once it acted (the list is read again: it shows what
# the act did)
Act = Callable[[list[Member], Member | None], Awaitable["StepOutcome | None"]]
Hint = Callable[[], str]  # what the final failure adds (why it may never have been accepted)


async def ensure_member(step: MemberStep, url: str, verify: ssl.SSLContext | bool, *,
                        transport: httpx.AsyncBaseTransport | None = None,
                        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                        clock: Callable[[], float] = time.monotonic) -> StepOutcome:
    """Carry one membership step out on the member at `url`, as its row of `_MEMBER_STEPS` acts:
    read the member list, act on it, until it answers."""
    acting, retry_on = _MEMBER_STEPS[type(step)]
    async with _etcd(url, verify, transport) as etcd:
        act, hint = acting(step, etcd, url)
        return await _until_done(step, etcd, act, retry_on, sleep, clock, hint)


async def _until_done(step: MemberStep, etcd: _Client, act: Act, retry_on: tuple[str, ...],
                      sleep: Callable[[float], Awaitable[None]], clock: Callable[[], float], hint: Hint) -> StepOutcome:
    """Read the member list and `act` on it and the member the step names until it answers; None
    means "look again now" (it acted). An etcd refusal that names one of `retry_on`, a transient one, or no answer is asked
    again every `poll_s` until the step's deadline, then fails with etcd's last answer and the
    number of requests."""
    deadline = clock() + step.timeout_s
    requests = 0
    while True:
        requests += 1
        try:
            members = await etcd.members()
            out = await act(members, _find(members, step.member, step.peer_url))
        except EtcdAnswer as exc:
            if not any(r in exc.etcd_message for r in (*retry_on, *TRANSIENT, UNREACHABLE)):
                raise
            if clock() + step.poll_s > deadline:
                raise StepError(f"{step.etcd_cluster}: {type(step).__name__} of {step.member} not accepted within "
                                f"{step.timeout_s:g}s ({requests} requests); etcd's last answer: "
                                f"{exc.etcd_message}{hint()}") from None
            await sleep(step.poll_s)
            continue
        if out is not None:
            return out


def _no_hint() -> str:
    return ""


def _add_learner(step: EtcdMemberAdd, etcd: _Client, url: str) -> tuple[Act, Hint]:
    added: list[Member] = []

    async def act(members: list[Member], named: Member | None) -> StepOutcome | None:
        if named is not None and step.peer_url not in named.peer_urls:  # found by its name only
            raise PermanentStepError(f"{step.etcd_cluster}: member {step.member} is listed with peer URLs "
                                     f"{','.join(named.peer_urls)}, not {step.peer_url}: remove it first; "
                                     "nothing was added")
        if named is not None and named.name not in ("", step.member):
            raise PermanentStepError(f"{step.etcd_cluster}: peer URL {step.peer_url} belongs to member "
                                     f"{named.name}, not {step.member}; nothing was added")
        if named is not None:
            what = (f"added {step.member} as a learner (id {int(named.id):x}, peer {step.peer_url}); start it "
                    "with --initial-cluster-state=existing" if added else
                    f"{step.member} ({step.peer_url}) is already a member: {named.describe()}")
            return _found(step, bool(added), what, members)
        try:
            body = await etcd.post("/v3/cluster/member/add", {"peerURLs": [step.peer_url], "isLearner": True})
        except EtcdAnswer as exc:
            if TOO_MANY_LEARNERS in exc.etcd_message:
                learners = ", ".join(m.describe() for m in members if m.learner)
                raise StepError(f"{step.etcd_cluster}: etcd takes one learner at a time and {learners} still is "
                                f"one (promote or remove it first); {step.member} was not added") from None
            raise
        added.append(_members({"members": [body.get("member") or {}]})[0])
        return None  # listed again: the list shows it

    return act, _no_hint


def _promote(step: EtcdMemberPromote, etcd: _Client, url: str) -> tuple[Act, Hint]:
    seen: list[Member] = []

    async def act(members: list[Member], m: Member | None) -> StepOutcome | None:
        if m is None:
            raise PermanentStepError(f"{step.etcd_cluster}: {step.member} ({step.peer_url}) is not a member; "
                                     "add it as a learner first")
        if not m.learner:
            what = "promoted" if seen else "already is a voting member"
            return _found(step, bool(seen), f"{step.member} {what}", members)
        seen.append(m)
        try:
            await etcd.post("/v3/cluster/member/promote", {"ID": m.id})
        except EtcdAnswer as exc:
            if NOT_A_LEARNER in exc.etcd_message and NOT_IN_SYNC not in exc.etcd_message:
                return None  # promoted meanwhile: the list says so
            raise
        return None  # listed again: the list shows it voting

    def hint() -> str:
        if seen and not seen[-1].name:
            return (f"; {step.member} has never started (no name in the member list): check that its etcd runs "
                    "and reaches the peers")
        return ""

    return act, hint


def _remove(step: EtcdMemberRemove, etcd: _Client, url: str) -> tuple[Act, Hint]:
    removed: list[Member] = []

    async def act(members: list[Member], m: Member | None) -> StepOutcome | None:
        if m is None:
            what = f"removed {removed[0].describe()}" if removed else f"{step.member} ({step.peer_url}) is not a member"
            return _found(step, bool(removed), what, members)
        if await etcd.asked_member_id() == m.id:
            # the member would stop serving as it applies its own removal: ask one that stays
            raise PermanentStepError(f"{step.etcd_cluster}: {url} is {step.member} itself; run the removal on a "
                                     "member that stays")
        try:
            await etcd.post("/v3/cluster/member/remove", {"ID": m.id})
        except EtcdAnswer as exc:
            if not any(s in exc.etcd_message for s in NOT_FOUND):
                raise
        removed.append(m)
        return None  # listed again: the list shows it gone

    return act, _no_hint


# step -> how it acts on the member list, and the etcd refusals it asks again on besides the
# transient ones (see the module docstring)
_MEMBER_STEPS: dict[type, tuple[Callable[[Any, _Client, str], tuple[Act, Hint]], tuple[str, ...]]] = {
    EtcdMemberAdd: (_add_learner, (UNHEALTHY,)),
    EtcdMemberPromote: (_promote, (NOT_IN_SYNC, UNHEALTHY)),
    EtcdMemberRemove: (_remove, (UNHEALTHY,)),
}


class EtcdMemberStepsMixin:
    """The steps that talk to an etcd member (the three membership steps, a snapshot) for a
    backend that says how it reaches one (`etcd_url`; a host: as given)."""

    http_transport: httpx.AsyncBaseTransport | None = None
    root: Path  # the node's filesystem root, where the step's TLS files are read
    snapshots: SnapshotTaker | None  # None: an agent started without a bus

    def etcd_url(self, url: str) -> str:
        return url

    def etcd_endpoint(self, url: str, tls: TlsFiles | None) -> tuple[str, ssl.SSLContext | bool]:
        return self.etcd_url(url), tls_verify(self.root, tls)

    async def etcd_snapshot(self, step: EtcdSnapshot) -> StepOutcome:
        if self.snapshots is None:
            raise PermanentStepError("this agent has no snapshot store (it was started without a bus)")
        return await self.snapshots.take(step, *self.etcd_endpoint(step.endpoint, step.tls))

    async def etcd_member(self, step: MemberStep) -> StepOutcome:
        """A membership step (add, promote, remove), on the member the step names."""
        url, verify = self.etcd_endpoint(step.endpoint, step.tls)
        return await ensure_member(step, url, verify, transport=self.http_transport)

    # the three steps' handlers (StepDispatch) are the one
    etcd_member_add = etcd_member_promote = etcd_member_remove = etcd_member
