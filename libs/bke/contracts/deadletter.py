"""What a service publishes when it gives up on a message (malformed, or failing after its
maximum deliveries), so nothing is lost silently: the raw bytes travel along.

A flood of an agent's outputs is reported instead of dead-lettered one message at a time: one
`DeadLettered` summary per node and window with no payload (so that the dead-letter stream does
not become the flood's new target), and one `AgentFlooding` event (bke.adapters.bus.flood)."""
from __future__ import annotations

from .base import Message
from .channel import Channel

__all__ = ["CHANNELS", "DEADLETTER", "AGENTS_FLOODING", "AgentFlooding", "DeadLettered"]

DEADLETTER = "bke.v1.deadletter"
AGENTS_FLOODING = "bke.v1.agents.flooding"


class DeadLettered(Message):
    subject: str
    service: str
    deliveries: int
    reason: str
    payload_b64: str  # the original bytes, for replay; requests never carry private keys; "" for a flood's summary


class AgentFlooding(Message):
    """Event: within one window a node's agent sent more outputs that answer no command in flight
    (or that are no message at all) than a working agent does. Counts only: the payloads are
    acknowledged and dropped once the node is past the bound."""

    cluster: str
    node: str
    service: str  # the consumer that counted them
    outputs: int  # stray outputs in the window so far
    malformed: int  # of them, bytes that were no message of the contract
    bytes: int
    window_s: float
    since: str  # the window's start
    at: str


CHANNELS: tuple[Channel, ...] = (
    Channel(AGENTS_FLOODING, AgentFlooding, "event", "A node's agent sent more outputs that answer no command in flight (or are no message) within a window than a working agent does: counts only, one per node and window; the dead-letter stream holds one summary of it, never the payloads.", ("dispatcher", "certs", "upgrader"), (),
            external="heard by dashboards (they may hear every event) and operators' tools (`nats sub bke.v1.agents.flooding`); `bke deadletters list` shows its summary"),
    Channel(DEADLETTER + ".{service}", DeadLettered, "event", "A message a service gave up on: malformed (at once) or still failing after its maximum deliveries.", ("planner", "certs", "renderer", "dispatcher", "upgrader"), (),
            external="read by operators (`bke deadletters list|show`); no service consumes what another gave up on",
            stored="dead-letters"),
)
