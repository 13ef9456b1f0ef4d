"""One row of the channel table: a subject, its message model, who sends and who hears it.

Each contract module declares its own rows beside its models (`CHANNELS`), and
`bke.contracts.subjects` gathers every module's rows into the table the bus is built from: the
services' NATS permissions (bke.adapters.auth.permissions), the streams' subjects
(bke.adapters.bus.streams, from `Channel.stream`), the AsyncAPI document and the generated
references. A new message is then its contract module, its sender and its receiver; everything
else follows from the row.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .base import Message

__all__ = ["Channel", "ChannelKind", "Stored"]

ChannelKind = Literal["command", "event", "request"]
# Where a channel's messages are kept: the services' commands (a work queue), the events (read by
# several services), a node's commands, the agents' outputs, the dead letters; "" for none (core
# NATS only: a request, live progress, a heartbeat).
Stored = Literal["commands", "events", "agent-commands", "agent-outputs", "dead-letters", ""]
_STORED_BY_KIND: dict[str, Stored] = {"command": "commands", "event": "events", "request": ""}


@dataclass(frozen=True)
class Channel:
    subject: str
    model: type[Message]
    kind: ChannelKind  # "request": core NATS request/reply, not stored
    summary: str
    senders: tuple[str, ...]
    receivers: tuple[str, ...]
    replies: tuple[type[Message], ...] = ()  # a request's possible replies
    # Why a route has no sender or no receiver among BKE's components (an operator's tool, say);
    # empty for every internal route. tests/contract/test_channel_routes.py holds the code to it.
    external: str = ""
    # A request that changes nothing (a status, a view, a dry run): what a read-only identity (a
    # dashboard) may send (bke.adapters.auth.permissions).
    reads: bool = False
    # The stream that keeps it, when not the one its kind goes to (`stream`); say why beside it.
    stored: Stored | None = None

    @property
    def stream(self) -> Stored:
        """Where it is kept: `stored`, else commands for a command, events for an event, nowhere
        for a request."""
        return _STORED_BY_KIND[self.kind] if self.stored is None else self.stored
