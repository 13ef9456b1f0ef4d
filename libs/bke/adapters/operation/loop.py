"""The one loop of the operations on a running cluster (bke.core.operation): an operation gives
its pure decide and fold, a table of carriers and its `changed` event; this runs them.

One pass (`reconcile`, called by bke.adapters.runner.Runner), top to bottom, each step returning
early:

    1. the operation's lease, or wait: of several replicas one moves a cluster's operation on
    2. no record: done; a record in a form this code must not read: failed (no pass can succeed)
    3. a record that ended: its operation slot released (again: idempotent), its end announced
       if it was not yet (a crash between the two heals here), done
    4. the answers recorded since the last pass folded in
    5. decide, carry the decision out through the carriers' table, decide again, until a Wait,
       Succeed or Fail (a carrier may answer one itself: a Node not there yet, an API that refused)
    6. on Succeed or Fail the operation's `ending` work, then the record ends (also on an error of
       4 to 6 the operation's `failure` ends it with); saved if anything changed
    7. an ended operation's slot released before anything announces it: whoever sees the end may
       start the next operation at once
    8. `changed` published if anything changed; an end announced once (the operation's own event)
    9. the outcome: done, failed (with the reason) or wait (its delay and reason)

`on_result` records an agent's answer beside the record and kicks the loop; `resume_all` after a
restart kicks every cluster whose operation runs or whose end is not announced yet; `begin`
starts a record inside the cluster's operation slot. Errors propagate to the Runner, which
retries (unless the operation's `failure` ends it on them): nothing is saved of a pass that
raised (the store forgets the record object it keeps), and every carrier is safe to repeat
(commands keep their ids, JetStream drops a duplicate).
"""
from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, TypeVar

from bke.adapters.bus.node_commands import SendCommands
from bke.adapters.runner import DONE, Kick, Outcome
from bke.adapters.state.command_signing import Sign
from bke.adapters.state.lease import claim_lease, release_lease
from bke.adapters.state.operation_slot import release_operation, start_in_slot
from bke.contracts.agent import AgentCommand, CommandResult, agent_subject
from bke.contracts.agent_steps import Step
from bke.contracts.base import Message
from bke.contracts.operation_ref import OperationKind, OperationRef
from bke.core.state.schema import StoredVersionError
from bke.core.operation import (
    Act, Answers, Decision, Fail, OperationStatus, Record, RunLocally, Send, Succeed, Wait, fold,
)
from bke.adapters.bus.handler import Publish

from .store import RecordStore

__all__ = ["ApplyResult", "Carrier", "EndEvent", "OperationLoop", "Publish"]

R = TypeVar("R", bound=Record)


def _no_kick(cluster: str, at_once: bool = False) -> None:
    """Before a runner drives the loop (Operations.drive), a wake-up has nobody to wake."""


# Carries a Send or RunLocally out on the record (marking what it sent); None to decide again,
# or what came of it instead (a Wait: not yet; a Fail: refused for good).
Carrier = Callable[[R, Act], Awaitable[Decision | None]]
# One agent's answer into the record: (record, command id, status, step, stderr) -> whether it
# was a command in flight (bke.core.operation.fold)
ApplyResult = Callable[[R, str, str, str, str], bool]
Ending = Wait | Succeed | Fail
LEASE_BUSY_S = 1.0


@dataclass(frozen=True)
class EndEvent:
    """An operation's own end event (a join's `finished`, a delete's `ClusterDeleted`) and the
    id JetStream de-duplicates it by."""

    message: Message
    subject: str
    msg_id: str


class OperationLoop(ABC, Generic[R]):
    """The loop of one kind of operation; the operation subclasses it with its hooks."""

    def __init__(self, store: RecordStore[R], publish: Publish, now: Callable[[], datetime], owner: str,
                 lease_ms: int, kick: Kick | None, *, sign: Sign | None, kind: str,
                 carriers: Mapping[str, Carrier[R]], log: logging.Logger | None = None, issuer: str = "dispatcher",
                 lease: str = "", send: SendCommands | None = None, decide: Callable[[R], Decision] | None = None,
                 apply: ApplyResult[R] | None = None) -> None:
        self.store, self.publish, self.now, self.owner, self.lease_ms = store, publish, now, owner, lease_ms
        # every command is signed (bke.adapters.state.command_signing), naming the service that sends it;
        # None: the operation sends its commands its own way (the upgrade's batches), or `send`
        # hands them to the dispatcher, which signs and sends them (bke.contracts.node_commands)
        self.sign, self.issuer, self.send = sign, issuer, send
        self.kick: Kick = kick or _no_kick  # the runner's (Operations.drive), at once or not
        # kind: the slot's kind unless `slot_kind` says otherwise, the logs', and the lease's name
        # unless `lease` names another (the upgrader's operations share the "upgrade" lease)
        self.kind, self.carriers = kind, carriers
        # what its commands carry and its results are routed by (bke.contracts.operation_ref)
        self.ref_kind = OperationKind(kind)
        self.lease = lease or kind
        self.log = log or logging.getLogger(f"bke.operation.{kind}")
        # the pure decide when it needs nothing besides the record, and how one agent's answer goes
        # into the record when the answers are only agents': the hooks `decider` and `fold` use them
        self.decide, self.apply = decide, apply

    # the operation's hooks -------------------------------------------------------------
    def fold(self, rec: R, answers: Answers) -> bool:
        """The answers into the record (pure); whether it changed. By default the agents' answers,
        each through the `apply` given. An operation that reads its answers its own way gives
        `folded` instead."""
        if self.apply is None:
            raise NotImplementedError(f"{self.kind}: neither apply, fold nor folded given")
        return fold(rec, answers.commands, self.apply)

    async def decider(self, rec: R) -> Callable[[R], Decision]:
        """The pure decide, with what it needs besides the record bound (read once a pass). By
        default the `decide` given, which needs only the record."""
        if self.decide is None:
            raise NotImplementedError(f"{self.kind}: neither decide nor decider given")
        return self.decide

    @abstractmethod
    def changed(self, rec: R, at: str) -> tuple[Message, str]:
        """The `changed` event of the record's view, and its subject."""

    def slot_kind(self, rec: R) -> str:
        """The record's kind in the cluster's operation slot (bke.adapters.state.operation_slot)."""
        return self.kind

    async def folded(self, rec: R) -> bool:
        """The answers recorded since the last pass folded into the record; whether it changed.
        An operation that reads its answers its own way (the upgrade: only its batch's, most of
        them known without asking Redis) says so here."""
        return self.fold(rec, await self.store.results(rec.cluster))

    async def save(self, rec: R) -> None:
        """Keep the record as the pass left it (an operation may keep more with its end)."""
        await self.store.save(rec)

    def failure(self, rec: R, exc: Exception) -> Fail:
        """What an error of a pass ends the operation with. By default it ends nothing: it
        propagates, and the Runner tries the pass again. An operation whose error would only
        repeat (the upgrade's PermanentError, a bug) ends Failed naming it instead."""
        raise exc

    def waited(self, rec: R, wait: Wait) -> bool:
        """Note a wait in the record (what it waits for); whether it changed."""
        return False

    async def ending(self, rec: R, end: Succeed | Fail) -> None:
        """What the operation does as its record ends, before the end is recorded (a restore's
        sealed copy of its snapshot goes)."""

    def end_event(self, rec: R) -> EndEvent | None:
        """An ended record's own end event (beyond `changed`) while it has not gone out; None
        when it has, or when the operation has none."""
        return None

    def end_sent(self, rec: R) -> None:
        """Mark in the record that its end event went out."""

    # the loop ---------------------------------------------------------------------------
    def owns(self, ref: OperationRef) -> bool:
        """Whether a result of the operation `ref` is this kind's."""
        return ref.kind == self.ref_kind

    def _ts(self) -> str:
        return self.now().isoformat()

    async def on_result(self, res: CommandResult) -> None:
        await self.store.record_result(res)
        self.kick(res.cluster)

    async def reconcile(self, cluster: str) -> Outcome:
        # 1. the operation's lease: of several replicas, one moves the cluster's operation on
        redis = self.store.redis
        if not await claim_lease(redis, cluster, self.lease, self.owner, self.lease_ms):
            return Outcome("wait", delay=LEASE_BUSY_S, reason=f"another replica holds the {self.lease} lease")
        try:
            return await self._pass(cluster)
        except BaseException:
            self.store.forget(cluster)  # the record object it keeps may hold facts that were not saved
            raise
        finally:
            await release_lease(redis, cluster, self.lease, self.owner)

    async def _pass(self, cluster: str) -> Outcome:
        # 2. no record: nothing to do; a record this code must not read: no pass can succeed
        try:
            rec = await self.store.load(cluster)
        except StoredVersionError as exc:
            self.log.error("%s record unreadable: %s", self.kind, exc, extra={"cluster": cluster})
            return Outcome("failed", reason=str(exc))
        if rec is None:
            return DONE
        # 3. ended before: its slot released again, its end announced if it was not
        if not rec.running:
            await self._ended(rec)
            return DONE
        # 4-6. the answers folded in, decided and carried out until it waits or ends, the end recorded
        changed, last = await self._move(rec)
        if changed:
            await self.save(rec)
        # 7-8. the slot freed before anything announces the end
        if not rec.running:
            await self._release(rec)
        if changed:
            await self.announce(rec)
        if not rec.running:
            await self._announce_end(rec)
        # 9. the outcome
        if isinstance(last, Fail):
            return Outcome("failed", reason=rec.message, node=last.node or None)
        return DONE if isinstance(last, Succeed) else Outcome("wait", delay=last.delay, reason=last.reason)

    async def _move(self, rec: R) -> tuple[bool, Ending]:
        """Steps 4 to 6 of a pass: whether the record changed, and the decision that ended the pass."""
        try:
            changed = await self.folded(rec)
            carried, last = await self._decide(rec)
            changed |= carried
            if isinstance(last, Wait):
                return changed | self.waited(rec, last), last
            await self.ending(rec, last)
        except Exception as exc:  # noqa: BLE001 - `failure` says whether it ends the operation
            last = self.failure(rec, exc)
        rec.finish(OperationStatus.SUCCEEDED if isinstance(last, Succeed) else OperationStatus.FAILED,
                   last.reason, self._ts())
        self.log.info("%s %s %s", self.kind, rec.status, last.reason,
                      extra={"cluster": rec.cluster, "request_id": rec.request_id})
        return True, last

    async def _decide(self, rec: R) -> tuple[bool, Ending]:
        """Decide and carry out until the operation waits or ends: whether anything was carried
        out, and the decision that ended the pass."""
        decide = await self.decider(rec)
        carried = False
        d = decide(rec)
        while isinstance(d, (Send, RunLocally)):
            instead = await self.carriers[d.action](rec, d)
            carried = carried or instead is None
            following = instead if instead is not None else decide(rec)
            if following == d:  # a carrier that moves nothing would loop for ever
                raise RuntimeError(f"{self.kind}: {d} carried out, then decided again")
            d = following
        return carried, d

    async def _ended(self, rec: R) -> None:
        await self._release(rec)
        await self._announce_end(rec)

    async def _announce_end(self, rec: R) -> None:
        end = self.end_event(rec)
        if end is None:
            return
        # published first (de-duplicated by its id), then marked: a crash between publishes the same again
        await self.publish(end.message.to_bytes(), end.subject, {"Nats-Msg-Id": end.msg_id})
        self.end_sent(rec)
        await self.store.save(rec)  # unless the record is gone (a delete's services removed it)

    async def _release(self, rec: R) -> None:
        await release_operation(self.store.redis, rec.cluster, self.slot_kind(rec), rec.request_id)

    async def announce(self, rec: R) -> None:
        """Publish the record's view on its `changed` subject."""
        ev, subject = self.changed(rec, self._ts())
        await self.publish(ev.to_bytes(), subject, {})

    async def send_command(self, cluster: str, node: str, command_id: str, phase: str, steps: list[Step],
                           expires_at: str = "", ref: OperationRef | None = None) -> None:
        """Sign one command and publish it to the node's agent. The caller marks it sent after:
        a crash in between publishes the same id again, which JetStream drops and an agent that
        completed it only replays. `expires_at`: when an agent no longer runs it ("" never); `ref`: the
        operation it is part of (by default this kind's, with no id or step)."""
        ref = ref or OperationRef(kind=self.ref_kind)
        cmd = AgentCommand(command_id=command_id, cluster=cluster, node=node, phase=phase, issued_at=self._ts(),
                           steps=steps, issuer=self.issuer, expires_at=expires_at, operation=ref)
        if self.send is not None:
            await self.send(ref, [cmd])  # signed and sent by the dispatcher
            return
        assert self.sign is not None, f"{self.kind} sends its commands its own way"
        signed = await self.sign(cmd)
        await self.publish(signed.to_bytes(), agent_subject(cluster, node, "command"), {"Nats-Msg-Id": command_id})

    async def begin(self, rec: R, check: Callable[[R | None], str], part_of: str = "") -> str:
        """Start `rec` unless refused: in the cluster's operation slot, claimed for it (released
        again if the record's own `check` refuses), or, with `part_of`, inside the slot of the
        apply run that holds it (checked by the caller; nothing is claimed). Started: announced
        and the loop woken. The refusal ("" when started)."""

        async def start() -> str:
            return await self.store.start(rec, check)

        if part_of:
            why = await start()
        else:
            why = await start_in_slot(self.store.redis, rec.cluster, self.slot_kind(rec), rec.request_id,
                                      self._ts(), start)
        if not why:
            await self.announce(rec)
            self.kick(rec.cluster)
        return why

    async def resume_all(self) -> list[str]:
        """After a (re)start: every cluster whose operation runs, or whose end is not announced."""
        resumed = []
        for cluster in await self.store.clusters():
            rec = await self.store.load(cluster)
            if rec is None:
                continue
            if rec.running or self.end_event(rec) is not None:
                self.kick(cluster)
                resumed.append(cluster)
            else:  # a crash between its end and its release heals here
                await self._release(rec)
        return resumed
