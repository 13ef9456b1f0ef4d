"""What a service publishes when it gives up on a message (malformed, or failing after its
maximum deliveries), so nothing is lost silently: the raw bytes travel along."""
from __future__ import annotations

from .base import Message

__all__ = ["DeadLettered"]


class DeadLettered(Message):
    subject: str
    service: str
    deliveries: int
    reason: str
    payload_b64: str  # the original bytes, for replay; requests never carry private keys
