"""The planner's answer on `bke.v1.cluster.diff` (`bke apply --dry-run`): a thin adapter over
`changes.py`. Placing and rendering thousands of nodes takes seconds of CPU, so it runs in a
thread, off the loop that handles the planner's other messages; a request never raises out of
here (an outage or a bad spec is an answer, not a dead subscription)."""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable

from pydantic import ValidationError

from bke.bus.service import Service
from bke.contracts.base import ErrorItem
from bke.contracts.changes import CLUSTER_DIFF, DIFF_QUEUE, DiffCluster
from bke.contracts.status import StatusError
from bke.spec import MAX_SPEC_BYTES
from bke.state import RedisPlanStore

from .changes import changes_of, place

__all__ = ["answer_diff", "serve_diff"]

log = logging.getLogger("bke.planner.diff")


async def answer_diff(data: bytes, store: RedisPlanStore, fetch_blob: Callable[[str], Awaitable[bytes]]) -> bytes:
    try:
        req = DiffCluster.model_validate_json(data)
    except ValidationError as exc:
        errors = [ErrorItem(path=".".join(str(p) for p in e["loc"]) or "message", message=e["msg"])
                  for e in exc.errors(include_url=False)]
        return StatusError(reason="Invalid", message="invalid diff request", errors=errors).to_bytes()
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
        reply = await asyncio.to_thread(changes_of, req.request_id, desired, stored, meta.digest if meta else "")
        return reply.to_bytes()
    except Exception as exc:  # noqa: BLE001 - answered, logged: the requester sees why
        log.warning("diff request failed: %s: %s", type(exc).__name__, exc, extra={"requestId": req.request_id})
        return StatusError(reason="Unavailable", message=f"{type(exc).__name__}: {exc}"[:500]).to_bytes()


def serve_diff(svc: Service, store: RedisPlanStore, fetch_blob: Callable[[str], Awaitable[bytes]]) -> None:
    subs: list[Any] = []

    async def on_request(msg: Any) -> None:
        if msg.reply:
            await msg.respond(await answer_diff(msg.data, store, fetch_blob))

    async def _start() -> None:
        subs.append(await svc.nc.subscribe(CLUSTER_DIFF, queue=DIFF_QUEUE, cb=on_request))

    async def _stop() -> None:
        for s in subs:
            await s.unsubscribe()
        subs.clear()

    svc.after_start.append(_start)
    svc.before_stop.append(_stop)
