"""What the dispatcher hears on JetStream: the planner's plans; the renderer's and certs
service's answers (a join's when they answer one, else the install's); sealed bundles and
accepted agents; the agents' results and refusals; `bke retry`. Each subscriber hands a typed
message to service_events.py or results.py, which decide."""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from bke.adapters.bus.flood import FloodWatch
from bke.adapters.bus.handler import Out, deprecated, typed
from bke.adapters.bus.misaddressed import Misaddressed
from bke.adapters.bus.other_incarnation import OtherIncarnation
from bke.contracts import PLAN_CREATED, PlanCreated
from bke.contracts.agent import (
    AGENTS_ACCEPTED, AGENTS_REFUSED, UPGRADER_RESULT, AgentAccepted, AgentRefused, CommandRefused, CommandResult,
)
from bke.contracts.certs import CERTS_FAILED, CERTS_ISSUED, CERTS_SEALED, CertsFailed, CertsIssued, CertsSealed
from bke.contracts.install import RETRY_INSTALL, RetryInstall
from bke.contracts.operation_ref import UPGRADER_KINDS
from bke.contracts.render import MANIFESTS_RENDERED, RENDER_FAILED, ManifestsRendered, RenderFailed
from bke.contracts.subjects import LEGACY_RETRY_REQUESTED
from bke.core.operation.refs import ref_of

from ..answered import SentOn
from ..command_key import CommandKeyCarrier
from ..known import KnownTargets
from ..results import Inputs
from ..service_events import ServiceEvents
from .basics import Basics
from .forgotten import Forgotten
from .loops import Loops

__all__ = ["join_first", "wire_answers"]

E = TypeVar("E")


def join_first(join: Callable[[E], Awaitable[bool]], install: Callable[[E], Awaitable[None]]) -> Callable[[E], Awaitable[None]]:
    """An answer goes to the join it answers (a finished install is never reopened), else to the install."""

    async def handle(ev: E) -> None:
        if not await join(ev):
            await install(ev)

    return handle


class _Answers:
    """The handlers that take more than one reader's part."""

    def __init__(self, services: ServiceEvents, loops: Loops, inputs: Inputs, known: KnownTargets,
                 forgotten: Forgotten, sent_on: SentOn):
        self.services, self.joins, self.inputs, self.known, self.forgotten = services, loops.joins, inputs, known, forgotten
        self.sent_on = sent_on

    # sealed bundles and accepted agents may be what a join waits for
    async def certs_sealed(self, ev: CertsSealed) -> None:
        await self.services.certs_sealed(ev)
        self.joins.kick(ev.cluster)

    async def agent_accepted(self, ev: AgentAccepted) -> None:
        await self.services.agent_accepted(ev)
        self.joins.kick(ev.cluster)

    async def on_result(self, res: CommandResult) -> list[Out]:
        if await self.forgotten(res.cluster):
            return []
        ref = ref_of(res)
        if ref is None or ref.kind not in UPGRADER_KINDS:
            # a forged or stray result costs a read, never a write. The upgrader's are not asked:
            # one of a node that is not in the plan has no accepted agent, and results.py drops
            # it on that (15,000 plan reads spared in a 5,000-node upgrade)
            await self.known.check_result(res)
        # the upgrader's answers go with the others of their turn, one message (answered.py)
        return await self.sent_on(await self.inputs.result(res))


def wire_answers(b: Basics, loops: Loops, command_keys: CommandKeyCarrier, known: KnownTargets,
                 forgotten: Forgotten) -> None:
    svc, joins, bs = b.svc, loops.joins, b.settings.batch_size
    # results of another incarnation of their cluster are dropped and counted (bke.adapters.bus.other_incarnation)
    inputs = Inputs(b.state, loops.installs.kick, b.now, loops.health.record, loops.ops,
                    other_incarnation=OtherIncarnation(svc.metrics, svc.name), on_command_key=command_keys.on_result)
    services = ServiceEvents(b.state, b.plans, loops.installs, loops.installs.kick, b.now)
    answers = _Answers(services, loops, inputs, known, forgotten, SentOn(b.publish))

    def t(model: Any, handler: Any) -> Callable[[bytes], Awaitable[None]]:
        return typed(model, handler, b.publish, b.notify)

    svc.work_subscriber(PLAN_CREATED, "BKE_EVENTS", "dispatcher-plans", t(PlanCreated, services.plan_created), batch_size=bs)
    # the renderer's and certs service's answers: a join's when they answer one, else the install's
    for subject, durable, model, of_join, of_install in (
            (MANIFESTS_RENDERED, "dispatcher-rendered", ManifestsRendered, joins.rendered, services.rendered),
            (RENDER_FAILED, "dispatcher-render-failed", RenderFailed, joins.render_failed, services.render_failed),
            (CERTS_ISSUED, "dispatcher-certs-issued", CertsIssued, joins.certs_issued, services.certs_issued),
            (CERTS_FAILED, "dispatcher-certs-failed", CertsFailed, joins.certs_failed, services.certs_failed)):
        svc.work_subscriber(subject, "BKE_EVENTS", durable, t(model, join_first(of_join, of_install)), batch_size=bs)
    # one per sealed batch or registration: thousands per big install, so the lean consumer
    svc.fast_subscriber(CERTS_SEALED, "BKE_EVENTS", "dispatcher-certs-sealed", t(CertsSealed, answers.certs_sealed))
    # a result or refusal on another node's subject is dropped and counted (bke.adapters.bus.misaddressed)
    misaddressed = Misaddressed(svc.metrics, svc.name)
    # a node's outputs that answer no command in flight, counted; past the bound, one summary
    # and one event per node and window instead of a dead letter each (bke.adapters.bus.flood)
    floods = FloodWatch(svc.metrics, svc.name, b.publish, b.now)
    # every agent result comes here, whoever's operation it answers: results.py routes it by
    # that operation (the upgrader's go on to it). `upgrader-result` is where agents of the
    # previous release answer the upgrader's commands (deprecated, read until bke.v2); a node's
    # outputs there are counted apart, as the upgrader counted them when it read them.
    for kind, durable, watch in (("result", "dispatcher-results", floods),
                                 (UPGRADER_RESULT, "dispatcher-upgrader-results", floods.apart())):
        svc.fast_subscriber(f"bke.v1.agent.*.*.{kind}", "BKE_AGENT_OUT", durable,
                            watch.guard(kind, t(CommandResult, misaddressed.guard(kind, answers.on_result))))
    # registrations go to the certs service only: the dispatcher learns a node's agent from
    # `certs.sealed` (the provisioned key), never from the agent's claim
    svc.fast_subscriber(AGENTS_ACCEPTED, "BKE_EVENTS", "dispatcher-agents-accepted", t(AgentAccepted, answers.agent_accepted))
    svc.fast_subscriber("bke.v1.agent.*.*.refused", "BKE_AGENT_OUT", "dispatcher-refusals",
                        floods.guard("refused", t(CommandRefused, misaddressed.guard("refused", inputs.command_refused)),
                                     every=True))  # a refusal never settles a command
    svc.work_subscriber(AGENTS_REFUSED, "BKE_EVENTS", "dispatcher-agents-refused", t(AgentRefused, inputs.agent_refused),
                        batch_size=bs)
    retry = t(RetryInstall, inputs.retry)
    svc.work_subscriber(RETRY_INSTALL, "BKE_COMMANDS", "dispatcher-retry", retry, batch_size=bs)
    svc.work_subscriber(LEGACY_RETRY_REQUESTED, "BKE_COMMANDS", "dispatcher-retry-legacy",
                        deprecated(LEGACY_RETRY_REQUESTED, RETRY_INSTALL, retry), batch_size=bs)
