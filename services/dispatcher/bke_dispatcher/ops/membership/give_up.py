"""A JoinNodes or RemoveNodes request the dispatcher gave up on, answered.

Why: a request whose every delivery failed with an unexpected error (a bug, a record it cannot
read) is dead-lettered by bke.adapters.bus.delivery after the consumer's maximum deliveries. Without an
answer its caller (`bke lab join-nodes`, the apply run in the upgrader) waits for
`join-nodes.finished` / `remove-nodes.finished` until its own timeout. The delivery's `give_up`
hook answers instead:

    body is no JSON object with a requestId and a cluster -> nothing to answer (the dead letter
                                                             is the record)
    the cluster's record is this very request's          -> nothing: it started, and its runner
                                                             ends and announces it
    otherwise                                            -> the slot claimed for it (if any) is
                                                             given back, then `*.finished`
                                                             Failed with the reason

The `finished` event carries the same de-duplication id as every other end of the request
(`join-finished:<rid>`, `remove-finished:<rid>`), so an answer already sent is not sent twice.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Literal

from redis.asyncio import Redis

from bke.contracts.membership import (
    JOIN_NODES_FINISHED, REMOVE_NODES_FINISHED, JoinNodesFinished, RemoveNodesFinished,
)
from bke.adapters.state.operation_slot import release_operation
from bke.contracts.statuses import FinishedStatus
from bke.adapters.bus.handler import Publish

from .gates import Loads

__all__ = ["GiveUp", "answer_given_up", "request_of"]

log = logging.getLogger("bke.dispatcher.membership")
GiveUp = Callable[[bytes, str], Awaitable[None]]
MAX_ID = 128  # the contracts' longest request id and cluster name (63): longer is no request of ours


def request_of(body: bytes) -> tuple[str, str] | None:
    """(request id, cluster) read from a request's body as plain JSON (the body may be one the
    model never accepted, e.g. a newer form); None when there is nothing to answer."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(doc, dict):
        return None
    rid, cluster = doc.get("requestId"), doc.get("cluster")
    if not (isinstance(rid, str) and isinstance(cluster, str) and 0 < len(rid) <= MAX_ID and 0 < len(cluster) <= 63):
        return None
    return rid, cluster


def answer_given_up(kind: Literal["join", "removal"], store: Loads, redis: Redis, publish: Publish,
                    now: Callable[[], datetime], kick: Callable[[str], None]) -> GiveUp:
    """The `give_up` hook of the join (`kind` "join") or removal consumer."""
    word = "join" if kind == "join" else "removal"

    async def gave_up(body: bytes, reason: str) -> None:
        ids = request_of(body)
        if ids is None:
            log.error("%s request given up on, with no request id to answer: %s", word, reason)
            return
        rid, cluster = ids
        extra = {"cluster": cluster, "request_id": rid}
        try:
            current = await store.load(cluster)
        except Exception as exc:  # noqa: BLE001 - an unreadable record may be why every delivery failed
            log.warning("%s record unreadable while giving up: %s: %s", word, type(exc).__name__, exc, extra=extra)
            current = None
        if current is not None and current.request_id == rid:
            kick(cluster)  # it started: its own end answers (and frees the slot)
            return
        await release_operation(redis, cluster, kind, rid)  # a claim left by a start that failed half-way
        at = now().isoformat()
        why = f"the dispatcher gave up on this {word} request after every delivery failed: {reason}"
        if kind == "join":
            ev: JoinNodesFinished | RemoveNodesFinished = JoinNodesFinished(
                request_id=rid, cluster=cluster, status=FinishedStatus.FAILED, reason=why, at=at, kind="operational")
            subject, msg_id = JOIN_NODES_FINISHED, f"join-finished:{cluster}:{rid}"
        else:
            ev = RemoveNodesFinished(request_id=rid, cluster=cluster, status=FinishedStatus.FAILED, reason=why, at=at,
                                     kind="operational")
            subject, msg_id = REMOVE_NODES_FINISHED, f"remove-finished:{cluster}:{rid}"
        log.error("%s request given up on: %s", word, reason, extra=extra)
        await publish(ev.to_bytes(), subject, {"Nats-Msg-Id": msg_id})

    return gave_up
