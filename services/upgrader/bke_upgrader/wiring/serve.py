"""The upgrader's subscribers to the other services' answers and to the agents' results the
dispatcher sends on, and its operations' resume and stop."""
from __future__ import annotations

import asyncio
import logging
from typing import Any

from bke.adapters.bus.handler import typed
from bke.adapters.bus.service import REDIS_PROBE_S, Service
from bke.contracts.node_commands import NODE_COMMANDS_ANSWERED, NodeCommandAnswered, NodeCommandsAnswered
from bke.contracts.certs import CERTS_FAILED, CERTS_ISSUED, CERTS_RENEWED, CertsFailed, CertsIssued, CertsRenewed
from bke.contracts.membership import JOIN_NODES_FINISHED, REMOVE_NODES_FINISHED, JoinNodesFinished, RemoveNodesFinished
from bke.adapters.operation import Operations
from bke.adapters.tasks import cancel_and_wait

from ..operation import Upgrades

__all__ = ["lifecycle", "serve_answers", "serve_results"]

log = logging.getLogger("bke.upgrader")


def serve_answers(svc: Service, upgrades: Upgrades) -> None:
    """The dispatcher's answers to a changed spec's removals and joins, and the certs service's
    to an upgrade's renewal or a changed spec's re-issue (others' are ignored)."""
    membership, certs = upgrades.membership, upgrades.certs
    answers: list[tuple[str, str, Any, Any]] = [
        (JOIN_NODES_FINISHED, "upgrader-joins-finished", JoinNodesFinished, membership.on_finished),
        (REMOVE_NODES_FINISHED, "upgrader-removals-finished", RemoveNodesFinished, membership.on_finished),
        (CERTS_ISSUED, "upgrader-certs-issued", CertsIssued, certs.on_issued),
        (CERTS_RENEWED, "upgrader-certs-renewed", CertsRenewed, certs.on_renewed),
        (CERTS_FAILED, "upgrader-certs-failed", CertsFailed, certs.on_failed),
    ]
    for subject, durable, model, handler in answers:
        svc.work_subscriber(subject, "BKE_EVENTS", durable, typed(model, handler, svc.publish, svc.notify))


def serve_results(svc: Service, ops: Operations) -> None:
    """The agents' answers to this service's commands, as the dispatcher, the one service that
    hears agents, sends them on: believed by its rule, and routed by the operation they answer
    (bke.contracts.operation_ref) to the operation here that runs it. A message's answers are
    handled at once, so an upgrade checks and records them together (its store's one recording)."""

    async def on_answer(ev: NodeCommandAnswered) -> None:
        if not await ops.on_result(ev.operation, ev.result):
            log.warning("an answer to no operation of this service's dropped (%s)", ev.operation.kind,
                        extra={"cluster": ev.result.cluster, "node": ev.result.node, "command_id": ev.result.command_id})

    async def on_answers(ev: NodeCommandsAnswered) -> None:
        # every answer is tried before the message is settled: one that fails (the store away)
        # has the message delivered again, and those recorded already are recorded once
        for got in await asyncio.gather(*(on_answer(a) for a in ev.answers), return_exceptions=True):
            if isinstance(got, BaseException):
                raise got

    svc.fast_subscriber(NODE_COMMANDS_ANSWERED, "BKE_COMMANDS", "upgrader-node-results",
                        typed(NodeCommandsAnswered, on_answers, svc.publish, svc.notify))


def lifecycle(svc: Service, redis: Any, ops: Operations) -> None:
    """Once started, the running operations resume (waiting for Redis if it is away); at stop,
    the loops end before the store's client closes."""
    background: list[asyncio.Task] = []
    stopping: list[bool] = []

    async def _resume() -> None:
        await svc.retry_while_store_away(ops.resume_all, lambda: bool(stopping), log)

    async def _started() -> None:
        background.append(asyncio.create_task(_resume(), name="upgrader:resume"))

    async def _stopping() -> None:
        stopping.append(True)
        await cancel_and_wait(background, timeout=2 * REDIS_PROBE_S)
        await ops.stop()
        await redis.aclose()

    svc.after_start.append(_started)
    svc.on_stop.insert(0, _stopping)
