"""Typed errors that say what the bus should do with the message that caused them.

    BKEError
    ├── TemporaryError(delay)  retry later: the message is nacked with that delay
    └── PermanentError         never retry: ack, and publish a *.rejected / *.failed event
        ├── RejectedInput      the input itself is wrong; carries field errors
        └── MalformedMessage   the bytes are no valid message of the subject's contract: there
                               is no request to answer, so the raw message is kept in the
                               dead-letter stream at once (never redelivered)
    (anything else)            a bug or an outage: nack with backoff, then dead-letter
                               after the consumer's max deliveries
"""
from __future__ import annotations

__all__ = ["BKEError", "MalformedMessage", "PermanentError", "RejectedInput", "TemporaryError"]


class BKEError(Exception):
    """Base of the errors the services raise on purpose."""


class TemporaryError(BKEError):
    def __init__(self, message: str, delay: float = 2.0):
        super().__init__(message)
        self.delay = delay


class PermanentError(BKEError):
    pass


class RejectedInput(PermanentError):
    def __init__(self, errors: list[tuple[str, str]], cluster: str | None = None):
        super().__init__("; ".join(f"{p}: {m}" for p, m in errors[:5]))
        self.errors = errors
        self.cluster = cluster


class MalformedMessage(PermanentError):
    pass
