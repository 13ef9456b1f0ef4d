"""The planner's answer on `bke.v1.cluster.diff` (`bke apply --dry-run`): a thin adapter over
`changes.py`. Placing and rendering thousands of nodes takes seconds of CPU, so it runs in a
thread, off the loop that handles the planner's other messages; a request never raises out of
here (an outage or a bad spec is an answer, not a dead subscription)."""
from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable

from pydantic import ValidationError

from bke.adapters.bus.responder import serve_requests
from bke.adapters.bus.service import Service
from bke.contracts.changes import CLUSTER_DIFF, DIFF_QUEUE, DiffCluster
from bke.contracts.status import MAX_PAGE, STATUS_GET, GetStatus, StatusError, StatusNode, invalid_request, parse_status_reply
from bke.core.lifecycle.diff import etcd_changes
from bke.core.lifecycle.etcd_health import unhealthy_etcd_members
from bke.core.plan import Plan
from bke.core.spec import MAX_SPEC_BYTES
from bke.adapters.state import RedisPlanStore

from .changes import EtcdHealth, changes_of, place

__all__ = ["answer_diff", "etcd_health", "serve_diff"]

# the dispatcher's status request: payload -> reply (raises when nobody answers in time)
AskStatus = Callable[[bytes], Awaitable[bytes]]
STATUS_TIMEOUT_S = 5.0

log = logging.getLogger("bke.planner.diff")


async def etcd_health(ask: AskStatus, plan: Plan) -> EtcdHealth:
    """The stored plan's unhealthy etcd members per the dispatcher's latest health round (every
    page of its unhealthy nodes), or why that is not known: a dry run without it still answers,
    saying so, since the apply checks health again before each member change."""
    nodes: list[StatusNode] = []
    offset: int | None = 0
    try:
        while offset is not None:
            reply = parse_status_reply(await ask(GetStatus(cluster=plan.cluster, nodes="unhealthy", offset=offset,
                                                           limit=MAX_PAGE).to_bytes()))
            if isinstance(reply, StatusError):
                return EtcdHealth(None, f"the dispatcher answered {reply.reason}: {reply.message}")
            nodes += reply.nodes
            if reply.next_offset is not None and reply.next_offset <= offset:
                return EtcdHealth(None, f"the dispatcher's pages do not move on (offset {offset})")
            offset = reply.next_offset
    except Exception as exc:  # noqa: BLE001 - no dispatcher, a timeout, a reply that does not parse
        return EtcdHealth(None, f"no answer on {STATUS_GET}: {type(exc).__name__}")
    return EtcdHealth(unhealthy_etcd_members(plan, nodes))


async def answer_diff(data: bytes, store: RedisPlanStore, fetch_blob: Callable[[str], Awaitable[bytes]],
                      ask_status: AskStatus | None = None) -> bytes:
    try:
        req = DiffCluster.model_validate_json(data)
    except ValidationError as exc:
        return invalid_request(exc, "invalid diff request", whole="message").to_bytes()
    try:
        if req.spec is not None:
            if len(req.spec.encode()) > MAX_SPEC_BYTES:
                return StatusError(reason="Invalid", message=f"spec: larger than {MAX_SPEC_BYTES} bytes").to_bytes()
            text: str | bytes = req.spec
        else:
            assert req.spec_ref is not None
            text = await fetch_blob(req.spec_ref)
        desired = await asyncio.to_thread(place, text)
        if isinstance(desired, StatusError):
            return desired.to_bytes()
        meta = await store.meta(desired.cluster)
        stored = await store.load(desired.cluster) if meta is not None else None
        # asked only when etcd membership changes: the quorum rule is its only reader
        health = None
        if stored is not None and ask_status is not None and etcd_changes(stored, desired):
            health = await etcd_health(ask_status, stored)
        reply = await asyncio.to_thread(changes_of, req.request_id, desired, stored, meta.digest if meta else "", health)
        return reply.to_bytes()
    except Exception as exc:  # noqa: BLE001 - answered, logged: the requester sees why
        log.warning("diff request failed: %s: %s", type(exc).__name__, exc, extra={"requestId": req.request_id})
        return StatusError(reason="Unavailable", message=f"{type(exc).__name__}: {exc}"[:500]).to_bytes()


def serve_diff(svc: Service, store: RedisPlanStore, fetch_blob: Callable[[str], Awaitable[bytes]]) -> None:
    """Answer `bke.v1.cluster.diff` (bke.adapters.bus.responder), asking the dispatcher for the
    health of etcd when a dry run changes its members."""

    async def ask_status(payload: bytes) -> bytes:
        return (await svc.nc.request(STATUS_GET, payload, timeout=STATUS_TIMEOUT_S)).data

    async def answer(subject: str, body: bytes) -> bytes:
        return await answer_diff(body, store, fetch_blob, ask_status)

    serve_requests(svc, CLUSTER_DIFF, DIFF_QUEUE, answer)
