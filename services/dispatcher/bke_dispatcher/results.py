"""Inputs from the agents: command results, refusals, retry requests (which ask the
renderer or certs service again when the failure was theirs).

Whose result is believed: a result counts only if the node in its subject (which
NATS permissions bind to that node's identity), in its payload and in its command id are the
same, and its `agent_id` is the agent the certs service sealed that node's bundle to (learned
from `certs.sealed`; a node outside the plan has none). The subject is compared with the
payload before these handlers, for results and refusals alike (bke.adapters.bus.misaddressed, in the
wiring). Anything else is dropped: acked, counted, logged at most once per LOG_EVERY_S per
cluster, and nothing of it (status, text) is recorded or shown. So is a result that answers a
command of another incarnation of its cluster (a deleted cluster's, replayed to an agent that
answered it from its journal: bke.core.secrets.binding), counted on /metrics apart
(bke.adapters.bus.other_incarnation). Refusals (an agent's `refused`,
the certs service's `agents.refused`) are logged and counted; they never count as a result.

A believed result goes to the operation it answers (bke.contracts.operation_ref: the one its
agent echoed, else the one its command id names): the install's phases, a health round, a
command-key rollover, the operations of ops/, or, for an operation the upgrader runs, on to the
upgrader (`bke.v1.node-commands.answered`, several to a message: answered.py): this is the one
service that hears agents. A turn's results of a cluster are checked together, and the install's
counted together, each in one round trip (bke.adapters.coalesce): 40,000 results in a
10,000-node install, 15,000 in a 5,000-node upgrade.

Each handler takes its typed message (bke.adapters.bus.handler), records what happened, wakes the
cluster's reconcile loop and returns what to publish; the loop decides what to do next. All of
them are safe under redelivery.
"""
from __future__ import annotations

import logging
import time
from datetime import datetime
from typing import Awaitable, Callable

from bke.adapters.bus.flood import mark_stray
from bke.adapters.bus.handler import Out
from bke.adapters.bus.other_incarnation import OtherIncarnation
from bke.adapters.coalesce import Coalesced
from bke.adapters.operation import Operations
from bke.adapters.runner import Kick
from bke.contracts.agent import AgentRefused, CommandRefused, CommandResult
from bke.contracts.install import NodeStepChanged, RetryInstall, install_subject
from bke.contracts.node_commands import NODE_COMMANDS_ANSWERED, NodeCommandAnswered
from bke.contracts.operation_ref import UPGRADER_KINDS, OperationKind
from bke.contracts.certs import ISSUE_CERTS, IssueCerts
from bke.contracts.render import RENDER_MANIFESTS, RenderManifests
from bke.contracts.statuses import CommandStatus, FinishedStatus, PhaseStatus, StepResultStatus
from bke.core.errors import MalformedMessage, NotYetKnown
from bke.core.operation.refs import ref_of
from bke.core.secrets.binding import result_refusal
from bke.adapters.state.operation_slot import claim_operation

from .command_ids import parse_command_id
from .phases import PHASES
from .readiness import INPUT_SERVICE, InputStatus
from .state import DispatcherState, FinishedCommand

__all__ = ["Inputs"]

log = logging.getLogger("bke.dispatcher")
STDERR_KEEP = 2000
LOG_EVERY_S = 10.0  # dropped results and refusals: one log line per cluster per period


class _RateLimited:
    """Count everything, log at most once per `every_s` per key (a flood must not flood the log)."""

    def __init__(self, every_s: float = LOG_EVERY_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.every_s, self.clock = every_s, clock
        self.count = 0
        self._last: dict[str, float] = {}
        self._since: dict[str, int] = {}

    def __call__(self, key: str, message: str, **extra: object) -> None:
        self.count += 1
        self._since[key] = self._since.get(key, 0) + 1
        now = self.clock()
        if now - self._last.get(key, -1e18) >= self.every_s:
            log.warning("%s (%d since the last such line)", message, self._since.pop(key), extra=extra)
            self._last[key] = now
            if len(self._last) > 10_000:  # bounded: keys are cluster names
                self._last.clear()


class Inputs:
    def __init__(
        self,
        state: DispatcherState,
        kick: Kick,
        now: Callable[[], datetime],
        on_health: Callable[[CommandResult], Awaitable[None]],
        operations: Operations,
        other_incarnation: OtherIncarnation | None = None,
        on_command_key: Callable[[CommandResult, int], Awaitable[None]] | None = None,
    ):
        # a command-key rollover's announcements (command_key.py): their answers are acknowledgements
        self.on_command_key = on_command_key
        # answers to a command of another incarnation of their cluster (bke.adapters.bus.other_incarnation)
        self.other_incarnation = other_incarnation or OtherIncarnation(None, "dispatcher")
        # the operations beside the install (rotation, reset, join, removal: ops/): each takes its own results
        self.operations = operations
        self.state, self.kick, self.now, self.on_health = state, kick, now, on_health
        self._request_ids: dict[str, str] = {}  # cluster -> request id, read once (it never changes)
        self.dropped = _RateLimited()  # results not believed (see the module docstring)
        self.refusals = _RateLimited()  # commands refused by agents, registrations by certs
        # cluster -> the checks of the results handled in one turn, read together
        self._checks: Coalesced[str, tuple[str, bool], tuple[str | None, str | None]] = Coalesced(self._read_checks)
        # (cluster, phase) -> the install's results of one turn, counted together (one round trip)
        self._finished: Coalesced[tuple[str, str], FinishedCommand, int] = Coalesced(self._finish_commands)

    async def _request_id(self, cluster: str) -> str:
        rid = self._request_ids.get(cluster)
        if rid is None:
            rid = (await self.state.install(cluster)).get("requestId", "")
            if rid:
                self._request_ids[cluster] = rid
        return rid

    async def _untrusted(self, res: CommandResult, node: str) -> tuple[str, bool]:
        """Why this result is not believed ("" if it is), and whether because it answers a
        command of another incarnation of its cluster. (Its subject names its payload's node:
        the wiring's guard, bke.adapters.bus.misaddressed, dropped it otherwise.) Read with the
        other results of its cluster handled in the same turn (`_checks`): an unbound command's
        answer is compared with no incarnation."""
        if node != res.node:
            return f"its command id names node {node}", False
        accepted, current = await self._checks(res.cluster, (res.node, res.incarnation is not None))
        if accepted is None:
            return "no agent of this node was accepted (not in the plan, or not provisioned)", False
        if accepted != res.agent_id:
            return f"agent {res.agent_id} is not the node's accepted agent", False
        why = result_refusal(res.incarnation, current)
        return (why, True) if why else ("", False)

    async def _read_checks(self, cluster: str, items: list[tuple[str, bool]]) -> list[tuple[str | None, str | None]]:
        """Per (node, whether its result carries an incarnation): the node's accepted agent and the
        cluster's current incarnation, for a whole turn's results in one round trip."""
        accepted, current = await self.state.results_checks(cluster, [n for n, _ in items], any(b for _, b in items))
        return [(a, current if bound else None) for a, (_, bound) in zip(accepted, items)]

    async def _finish_commands(self, key: tuple[str, str], items: list[FinishedCommand]) -> list[int]:
        counted, all_in = await self.state.count_results(*key, items)
        if all_in:  # the phase's last answer: its next pass goes now, not after the coalescing window
            self.kick(key[0], True)
        return counted

    async def result(self, res: CommandResult) -> list[Out]:
        try:
            cluster, slug, node, gen = parse_command_id(res.command_id)
        except ValueError as exc:
            raise MalformedMessage(f"malformed command result: command id {res.command_id!r}: {exc}") from exc
        ref = ref_of(res)  # the operation it answers: echoed by the agent, else named by its command id
        other = False
        if cluster != res.cluster:
            why = f"its command id names cluster {cluster}"
        else:
            # thousands at a time in a big install or upgrade: checked a turn's at once
            why, other = await self._untrusted(res, node)
        if other or why:
            mark_stray()  # no command in flight of this node's: counted towards a flood (bke.adapters.bus.flood)
        if other:
            self.other_incarnation.dropped(res, why)
            return []
        if why:
            self.dropped(res.cluster, f"result dropped: {why}", cluster=res.cluster, node=res.node,
                         command_id=res.command_id)
            return []
        if ref is None:
            raise MalformedMessage(f"malformed command result: command id {res.command_id!r} names no operation")
        if ref.kind in UPGRADER_KINDS:  # an upgrade's, a changed spec's or a restore's: sent on to the upgrader
            # with the others of its turn in one message, stored (the wiring's, answered.py)
            return [Out(NodeCommandAnswered(operation=ref, result=res), NODE_COMMANDS_ANSWERED)]
        if ref.kind == OperationKind.COMMAND_KEY:  # a command-key rollover's announcement: no phase counts it
            if self.on_command_key is not None:
                await self.on_command_key(res, gen)
            return []
        if ref.kind == OperationKind.HEALTH:
            await self.on_health(res)
            return []
        if ref.kind != OperationKind.INSTALL:  # a rotation's, a reset's, a join's or a removal's (ops/)
            if not await self.operations.on_result(ref, res):
                mark_stray()  # of no operation this service runs
            return []
        if slug == "health":  # the install's own health phase is every node's first health answer
            await self.on_health(res)
        failed_step = next((s for s in res.steps if s.status == StepResultStatus.FAILED), None)
        step = failed_step.id if failed_step else ""
        stderr = (failed_step.stderr or failed_step.stdout)[-STDERR_KEEP:] if failed_step else ""
        now = self.now().isoformat()
        counted = await self._finished((cluster, slug), FinishedCommand(node, res.command_id, gen, res.status, step, stderr, now))
        if counted < 0:
            # the dispatcher that resumes records the command, then this counts; a command or
            # generation never recorded is dead-lettered after NotYetKnown's bound
            raise NotYetKnown(f"result of {res.command_id} before its command was recorded", delay=1.0)
        self.kick(cluster)
        if not counted:
            mark_stray()  # its command was settled already: a replay, or the same result sent again
            return []
        if res.status == FinishedStatus.FAILED:
            log.warning("node step failed", extra={"cluster": cluster, "node": node, "phase": slug, "step": step})
        ev = NodeStepChanged(
            request_id=await self._request_id(cluster), cluster=cluster, node=node, phase=slug,
            status=res.status, at=now, step=step or None, stderr=stderr,
        )
        return [Out(ev, install_subject(cluster, "node"), live=True)]

    async def command_refused(self, ev: CommandRefused) -> None:
        """An agent would not run a command: counted in the install's status (`refusals`, with
        the last reason), logged rate-limited, never a success. (A genuine command refused stays
        Sent; its phase waits and shows the node as running, and `bke status` says why.)"""
        why = f"agent of {ev.node} refused command {ev.command_id or '(malformed)'}: {ev.reason}"
        await self.state.record_refusal(ev.cluster, ev.node, why, ev.at)  # shown by `bke status`
        self.refusals(ev.cluster, why, cluster=ev.cluster, node=ev.node, command_id=ev.command_id)

    async def agent_refused(self, ev: AgentRefused) -> None:
        """The certs service refused a registration (a key BKE did not provision)."""
        why = f"registration for {ev.node} refused: {ev.reason}"
        await self.state.record_refusal(ev.cluster, ev.node, why, ev.at)  # shown by `bke status`
        self.refusals(ev.cluster, why, cluster=ev.cluster, node=ev.node, agent_id=ev.agent_id)

    async def retry(self, req: RetryInstall) -> list[Out]:
        c = req.cluster
        failed_phase = None
        for phase in PHASES:
            if (await self.state.phase(c, phase.slug)).get("status") == PhaseStatus.FAILED:
                failed_phase = phase.slug
                break
        if failed_phase is None:
            log.info("retry: nothing failed", extra={"cluster": c, "request_id": req.request_id})
            return []
        # the install runs again: it takes the cluster's operation slot back (another operation,
        # say a reset of the failed install, refuses the retry, named)
        rid = (await self.state.install(c)).get("requestId", "")
        if rid:
            claim = await claim_operation(self.state.r, c, "install", rid, self.now().isoformat())
            if not claim.won:
                log.warning("retry refused: %s", claim.refusal(c), extra={"cluster": c, "request_id": req.request_id})
                return []
        cmds = await self.state.all_commands(c, failed_phase)
        chosen = {h: cmd for h, cmd in cmds.items() if cmd["status"] == CommandStatus.FAILED and (not req.nodes or h in req.nodes)}
        for cmd in chosen.values():
            cmd.update(status=CommandStatus.RETRY, gen=cmd["gen"] + 1)
        # A service's failure is asked of that service again: its record first (so that its new
        # answer is never overwritten), then the install back to Running, then the command.
        asked = []
        for name, doc in (await self.state.inputs(c)).items():
            if doc.get("status") == InputStatus.FAILED.value:
                await self.state.set_input(c, name, {**doc, "status": InputStatus.REQUESTED.value, "reason": ""})
                asked.append(name)
        await self.state.retry_nodes(c, failed_phase, chosen)
        log.info("retry", extra={"cluster": c, "phase": failed_phase, "nodes": sorted(chosen), "asked": asked})
        self.kick(c)
        # one command per service ("certs" and "seal" both ask the certs service)
        return [_ask_again(service, req) for service in dict.fromkeys(INPUT_SERVICE[n] for n in asked)]


def _ask_again(service: str, req: RetryInstall) -> Out:
    """The command that asks a service (of readiness.INPUT_SERVICE) to do its work again."""
    msg_id = f"retry:{req.request_id}:{service}"
    if service == "renderer":
        return Out(RenderManifests(request_id=req.request_id, cluster=req.cluster), RENDER_MANIFESTS, msg_id)
    return Out(IssueCerts(request_id=req.request_id, cluster=req.cluster), ISSUE_CERTS, msg_id)
