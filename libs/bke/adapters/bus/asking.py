"""Asking another service over core request/reply, the caller's side: one way to turn what can go
wrong (no answer in time, an answer this code does not read, the owner's StatusError) into one
retryable error the caller names, so every client of an owner's answer fails alike.

    TemporaryError
    └── OwnerUnavailable   the owner did not tell: retried after `delay` (each client subclasses it)
"""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from pydantic import ValidationError

from bke.contracts.status import StatusError
from bke.core.errors import TemporaryError

__all__ = ["OwnerUnavailable", "Request", "ask_owner"]

Request = Callable[[str, bytes, float], Awaitable[bytes]]  # subject, payload, timeout -> reply
R = TypeVar("R")
RETRY_S = 5.0


class OwnerUnavailable(TemporaryError):
    """The owner of an answer did not give it: ask again later."""

    def __init__(self, message: str, delay: float = RETRY_S):
        super().__init__(message, delay)


async def ask_owner(request: Request, subject: str, body: bytes, timeout_s: float,
                    parse: Callable[[bytes], R | StatusError], unavailable: type[OwnerUnavailable],
                    owner: str, expected: str) -> R:
    """The owner's reply to `body` on `subject`, parsed; `unavailable` raised, naming the subject,
    when none came in time, when it is no `expected` (the reply's model), or when the owner
    answered a StatusError."""
    try:
        reply = parse(await request(subject, body, timeout_s))
    except ValidationError as exc:
        raise unavailable(f"{subject}: an answer that is no {expected} ({exc.error_count()} error(s))") from exc
    except Exception as exc:  # noqa: BLE001 - no owner answered in time: ask again later
        raise unavailable(f"no answer on {subject}: {type(exc).__name__}") from exc
    if isinstance(reply, StatusError):
        raise unavailable(f"{subject}: the {owner} answered {reply.reason}: {reply.message}")
    return reply
