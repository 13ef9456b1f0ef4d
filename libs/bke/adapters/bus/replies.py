"""Answer a core request only on an inbox.

nats-server lets a service publish its answer on whatever reply subject the request named, past
its publish permissions (`allow_responses`): a requester that named `bke.v1.install.c1.finished`
as its reply would have a service publish one message there, and JetStream would store it as an
event of that service. Every BKE client's replies come on an inbox (`_INBOX.` or an identity's
own `_INBOX_<name>.`, bke.adapters.auth.permissions.inbox_prefix), so anything else is not answered.
"""
from __future__ import annotations

import logging
from typing import Any

__all__ = ["answerable", "is_inbox"]

log = logging.getLogger(__name__)


def is_inbox(reply: str) -> bool:
    first = reply.split(".", 1)[0]
    return first == "_INBOX" or (first.startswith("_INBOX_") and "." in reply)


def answerable(msg: Any) -> bool:
    """The request has a reply subject and it is an inbox (a refusal is logged, not answered)."""
    reply = getattr(msg, "reply", "") or ""
    if not reply:
        return False
    if is_inbox(reply):
        return True
    log.warning("request not answered: its reply subject is not an inbox",
                extra={"subject": getattr(msg, "subject", ""), "reply": reply[:200]})
    return False
