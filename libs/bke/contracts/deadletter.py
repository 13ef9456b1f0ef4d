"""What a service publishes when it gives up on a message (malformed, or failing after its
maximum deliveries), so nothing is lost silently: the raw bytes travel along.

A flood of an agent's outputs is reported instead of dead-lettered one message at a time: one
`DeadLettered` summary per node and window with no payload (so that the dead-letter stream does
not become the flood's new target), and one `AgentFlooding` event (bke.adapters.bus.flood)."""
from __future__ import annotations

from .base import Message

__all__ = ["AGENTS_FLOODING", "AgentFlooding", "DeadLettered"]

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
