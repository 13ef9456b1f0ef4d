"""The record of a join or a removal of workers in Redis, one per cluster (the shape of
resets.ResetStore, for any record with `to_json`/`from_json`, `cluster` and `request_id`).

    bke:<c>:join | removal             string  the current (or last) operation, JSON
    bke:<c>:join | removal:results     hash    command id -> {status, step, stderr} as the agent
                                               answered; `input:<name>` -> what a service said
    bke:joins | bke:removals           set     clusters with such a record (resumed after a restart)

Only the reconcile step (under the operation's lease) and the start (a WATCH transaction that
refuses while another operation runs) write the record; answers are recorded beside it and
folded in by the next pass, so an answer that arrives twice counts once.
"""
from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any, Generic, Protocol, TypeVar

from redis.asyncio import Redis

from bke.contracts.agent import CommandResult
from bke.core.errors import TemporaryError
from bke.core.plan import Plan
from bke.adapters.state import PlanCache
from bke.adapters.state.exclusive import write_unless
from bke.adapters.state.operation_slot import start_in_slot
from bke.core.state.schema import StoredVersionTooNew, StoredVersionTooOld, record_kind

from ...state import DispatcherState

__all__ = ["INPUT_PREFIX", "Busy", "OperationStore", "Record"]

INPUT_PREFIX = "input:"  # a results field that holds a service's answer, not an agent's


class Record(Protocol):
    cluster: str
    request_id: str

    def to_json(self) -> str: ...


R = TypeVar("R", bound=Record)


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else v


class OperationStore(Generic[R]):
    def __init__(self, redis: Redis, parse: Callable[[str | bytes], R], key: Callable[[str], str],
                 results_key: Callable[[str], str], index: str):
        self.r, self.parse, self.key, self.results_key, self.index = redis, parse, key, results_key, index

    async def load(self, cluster: str) -> R | None:
        raw = await self.r.get(self.key(cluster))
        return None if raw is None else self.parse(raw)

    async def load_judged(self, cluster: str) -> tuple[R | None, str]:
        """The record a request is judged against, or why it cannot be read (then None): a form
        newer than this dispatcher reads (a newer dispatcher wrote it) or older than it converts.
        Waiting changes neither, so the request is answered with that reason, never retried."""
        try:
            return await self.load(cluster), ""
        except StoredVersionTooNew as exc:
            newest = record_kind(exc.kind).current
            return None, (f"the {exc.kind} record of {cluster} is in form version {exc.version}, and this dispatcher "
                          f"reads forms up to {newest}: a newer dispatcher wrote it; upgrade this dispatcher")
        except StoredVersionTooOld as exc:
            return None, str(exc)

    async def save(self, rec: R) -> bool:
        """Write the record unless it is gone (a delete removed the cluster's records): False then."""
        return bool(await self.r.set(self.key(rec.cluster), rec.to_json(), xx=True))

    async def start(self, rec: R, check: Callable[[R | None], str]) -> str:
        """Store `rec` unless `check(current)` refuses; the refusal ("" when stored)."""
        def write(pipe: Any) -> None:
            pipe.set(self.key(rec.cluster), rec.to_json())
            pipe.delete(self.results_key(rec.cluster))
            pipe.sadd(self.index, rec.cluster)

        return await write_unless(self.r, self.key(rec.cluster),
                                  lambda raw: check(None if raw is None else self.parse(raw)), write)

    async def record_result(self, res: CommandResult, step: str, stderr: str) -> None:
        doc = json.dumps({"status": res.status, "step": step, "stderr": stderr})
        await self.r.hset(self.results_key(res.cluster), res.command_id, doc)

    async def record_input(self, cluster: str, name: str, request_id: str, status: str, digest: str, reason: str) -> None:
        doc = json.dumps({"requestId": request_id, "status": status, "digest": digest, "reason": reason[:2000]})
        await self.r.hset(self.results_key(cluster), INPUT_PREFIX + name, doc)

    async def results(self, cluster: str) -> dict[str, dict[str, str]]:
        raw = await self.r.hgetall(self.results_key(cluster))
        return {_s(k): json.loads(v) for k, v in raw.items()}

    async def clusters(self) -> list[str]:
        return sorted(_s(c) for c in await self.r.smembers(self.index))


@dataclass(frozen=True)
class Busy:
    """Another operation that holds the cluster: its kind (the slot's: apply, upgrade, reset,
    rotation, join, removal, ...) and request id. Compared as data; its text is for people."""

    kind: str
    request_id: str

    def __str__(self) -> str:
        return f"{self.kind} {self.request_id}"


@dataclass(frozen=True)
class Gates:
    """What a join or removal request is judged on: the stored plan (None: none, or the store is
    away for a moment), the install's status, another operation running (None if none), a pause."""

    plan: Plan | None
    install: str | None
    busy: Busy | None
    paused: bool

    @property
    def busy_text(self) -> str:
        """The other operation, described for a refusal ("upgrade u1"; "" if none)."""
        return str(self.busy) if self.busy else ""

    def within(self, cluster: str, part_of: str | None) -> tuple["Gates", str]:
        """The gates of a request sent by the operation `part_of` (bke apply's run, which holds
        the slot: kind apply, that request id), and why it is refused ("" if it is not): its
        own holder is no other operation; any other holder, or none, refuses it (the run it
        names has ended, or never was)."""
        if not part_of:
            return self, ""
        if self.busy == Busy("apply", part_of):
            return replace(self, busy=None), ""
        return self, (f"partOf: apply {part_of} does not hold the operation slot of {cluster} "
                      f"({self.busy_text or 'nothing'} does)")


async def start_operation(redis: Any, cluster: str, kind: str, request_id: str, part_of: str | None, since: str,
                          start: Callable[[], Awaitable[str]]) -> str:
    """Start a join's or removal's record: in the cluster's operation slot, claimed for it
    (`start_in_slot`), or inside the slot of the apply run it is part of (`Gates.within`
    checked that run holds it; nothing is claimed, and its end releases nothing)."""
    if part_of:
        return await start()
    return await start_in_slot(redis, cluster, kind, request_id, since, start)


async def read_gates(cluster: str, plans: PlanCache, state: DispatcherState,
                     busy: Callable[[str], Awaitable[Busy | None]], paused: Callable[[str], Awaitable[bool]]) -> Gates:
    """One read of everything both requests check (join.join_refusal, removal.removal_refusal)."""
    try:
        plan: Plan | None = await plans.load(cluster)
    except TemporaryError:
        plan = None
    install = (await state.install(cluster)).get("status")
    return Gates(plan, install, await busy(cluster) if plan is not None else None, await paused(cluster))
