"""What a join or a removal of workers is judged on before it starts: the stored plan, the
install's status, a pause, and another operation that holds the cluster (read as data, `Busy`).
One read of all of it (`read_gates`); a request sent by bke apply's run (`partOf`) is judged
inside that run's slot (`Gates.within`)."""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any, Generic, Protocol, TypeVar

from redis.asyncio import Redis

from bke.adapters.bus.handler import Out
from bke.adapters.state import PlanCache
from bke.adapters.operation import EndEvent, OperationLoop
from bke.adapters.state.operation_slot import operation_holder
from bke.contracts.membership import JoinNodes, RemoveNodes
from bke.contracts.statuses import FinishedStatus, OperationStatus
from bke.core.errors import TemporaryError
from bke.core.operation import OperationRecord
from bke.core.plan import Plan

from ...state import DispatcherState

__all__ = ["Admission", "Busy", "Gates", "Judged", "Loads", "MembershipLoop", "busy_reader", "end_fields", "read_gates"]


class Loads(Protocol):
    """A store of one kind of record (bke.adapters.operation.RecordStore): what `busy_reader` reads."""

    async def load(self, cluster: str) -> OperationRecord | None: ...


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


async def read_gates(cluster: str, plans: PlanCache, state: DispatcherState,
                     busy: Callable[[str], Awaitable[Busy | None]], paused: Callable[[str], Awaitable[bool]]) -> Gates:
    """One read of everything both requests check (join.join_refusal, removal.removal_refusal)."""
    try:
        plan: Plan | None = await plans.load(cluster)
    except TemporaryError:
        plan = None
    install = (await state.install(cluster)).get("status")
    return Gates(plan, install, await busy(cluster) if plan is not None else None, await paused(cluster))


def busy_reader(redis: Redis, rotations: Loads, joins: Loads, removals: Loads,
                own: str = "") -> Callable[[str], Awaitable[Busy | None]]:
    """Another operation that holds the cluster (one at a time), or None: the cluster's
    operation slot (every kind claims it; a join's and a removal's own claim is the atomic
    step), then the records that may run without a claim (written before the slot existed).
    `own`: the asking operation's kind, whose running record its own refusal describes better."""

    async def busy(cluster: str) -> Busy | None:
        holder = await operation_holder(redis, cluster)
        if holder is not None and holder.kind not in ("join", "removal"):
            return Busy(holder.kind, holder.request_id)
        for kind, store in (("rotation", rotations), ("join", joins), ("removal", removals)):
            running = await store.load(cluster)
            if running is not None and running.running:
                return None if kind == own else Busy(kind, running.request_id)
        return None

    return busy


R = TypeVar("R", bound=OperationRecord)
Q = TypeVar("Q", JoinNodes, RemoveNodes)  # the request that starts the record


@dataclass(frozen=True)
class Admission(Generic[R]):
    """What a join or removal request is judged on, read once: the cluster's current record of
    that kind (None: none, or unreadable, and why), the gates, and why the request's `partOf`
    refuses it ("" if it does not)."""

    current: R | None
    unreadable: str
    gates: Gates
    outside: str


@dataclass(frozen=True)
class Judged(Generic[R]):
    """A request as its operation judges it on its gates: `check` says why a record may not start
    beside the cluster's current one ("" if it may: it runs again inside the start's
    transaction), and `new` builds the record to start once nothing refuses it (None: none can
    be built, and `check` said why)."""

    check: Callable[[R | None], str]
    new: Callable[[], R | None]


class MembershipLoop(OperationLoop[R], Generic[R, Q]):
    """What a join's and a removal's loops share: a request judged on one read of its gates
    (`admit`) and started (`on_request`), and a `finished` event marked sent in the record.
    Subclasses set `plans`, `state`, `busy` and `paused`, judge their request in `judged`, and
    build their events in `refused` and `finished_event`."""

    plans: PlanCache
    state: DispatcherState
    busy: Callable[[str], Awaitable[Busy | None]]
    paused: Callable[[str], Awaitable[bool]]

    def finished_event(self, rec: R) -> EndEvent:
        raise NotImplementedError

    async def judged(self, req: Q, gates: Gates) -> Judged[R]:
        """The request's own check and record (see `Judged`), on the gates read for it."""
        raise NotImplementedError

    def refused(self, req: Q, why: str, kind: str) -> Out:
        """The `finished` event (Failed) that answers a refused request; `kind`: "operational"
        when the cluster's record could not be read, else "invalid"."""
        raise NotImplementedError

    async def on_request(self, req: Q) -> list[Out]:
        """Start the request's record in the cluster's operation slot (or the slot of the apply
        run it is part of), or answer why not; nothing for a redelivery."""
        ids = {"cluster": req.cluster, "request_id": req.request_id}
        a = await self.admit(req.cluster, req.request_id, req.part_of)
        if a is None:  # a redelivery
            return []
        judged = await self.judged(req, a.gates)
        why = a.unreadable or a.outside or judged.check(a.current)
        rec = None if why else judged.new()
        if rec is not None:
            # the cluster's one operation slot (bke.adapters.state.operation_slot): atomic against every
            # other kind; released again if the record refuses after all (or the slot of the
            # apply run this request is part of)
            why = await self.begin(rec, judged.check, part_of=req.part_of or "")
        if why or rec is None:
            self.log.warning("%s refused: %s", self.kind, why, extra=ids)
            return [self.refused(req, why, "operational" if a.unreadable else "invalid")]
        self.log.info("%s started: %d node(s)", self.kind, len(rec.nodes), extra=ids)
        return []

    def end_event(self, rec: R) -> EndEvent | None:
        return None if rec.finished_sent else self.finished_event(rec)

    def end_sent(self, rec: R) -> None:
        rec.finished_sent = True

    async def admit(self, cluster: str, request_id: str, part_of: str | None) -> Admission[R] | None:
        """Everything a request is judged on, or None for a redelivery of the request whose
        record exists already (its loop is kicked instead: it answers when it moves)."""
        current, unreadable = await self.store.load_judged(cluster)
        if current is not None and current.request_id == request_id:
            self.kick(cluster)
            return None
        gates, outside = (await read_gates(cluster, self.plans, self.state, self.busy, self.paused)).within(
            cluster, part_of)
        return Admission(current, unreadable, gates, outside)


def end_fields(rec: OperationRecord) -> dict[str, Any]:
    """The fields every `finished` event of an ended record carries (a join's, a removal's)."""
    failed = rec.status == OperationStatus.FAILED
    return {"request_id": rec.request_id, "cluster": rec.cluster, "reason": rec.message, "at": rec.finished_at,
            "status": FinishedStatus.FAILED if failed else FinishedStatus.SUCCEEDED,
            "kind": "operational" if failed else None}
