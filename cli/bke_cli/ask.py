"""Asking a service over the bus (NATS request/reply): the CLI reads every view this way, never
from a service's store.

`request` turns "nobody listens" and "no answer in time" into one error of the caller's, named
after the service; `ask_view` is the one-shot form for a view answered as itself or as a
`StatusError` (an upgrade's, a restore's).
"""
from __future__ import annotations

import json
from typing import Any, TypeVar

from nats.aio.client import Client as NatsClient
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout
from pydantic import BaseModel

from bke.adapters.bus.connect import BusAccess, connect_nats
from bke.contracts.base import Message
from bke.contracts.status import StatusError

__all__ = ["ask_view", "request"]

V = TypeVar("V", bound=BaseModel)


async def request(nc: NatsClient, subject: str, req: Message, timeout: float, who: str,
                  error: type[Exception]) -> bytes:
    """The reply's body; `error` when no `who` (the planner, a dispatcher) answers or not in time."""
    try:
        return (await nc.request(subject, req.to_bytes(), timeout=timeout)).data
    except NoRespondersError as exc:
        raise error(f"no {who} answers on {subject}; is it running?") from exc
    except NatsTimeout as exc:
        raise error(f"no answer on {subject} within {timeout:.0f}s") from exc


async def ask_view(access: BusAccess | str, subject: str, req: Message, view: type[V], **connect: Any) -> V | StatusError:
    """One request on a connection of its own: the view, or the StatusError answered instead.
    NATS' own errors (nobody answers, a timeout) reach the caller, which names the service."""
    nc = await connect_nats(access, **connect)
    try:
        raw = (await nc.request(subject, req.to_bytes(), timeout=10)).data
    finally:
        await nc.close()
    doc = json.loads(raw)
    return StatusError.model_validate(doc) if "reason" in doc else view.model_validate(doc)
