"""Typed errors that say what the bus should do with the message that caused them.

    BKEError
    ├── TemporaryError(delay)  retry later: the message is nacked with that delay
    │   └── NotYetKnown        the target (a command, a phase record) may simply not be recorded
    │                          yet: retried with that delay, but only `max_tries` times, then
    │                          dead-lettered with the reason (a message that can never succeed
    │                          must not be retried forever)
    ├── Unavailable            the store or the bus is away (an outage, not the message's fault):
    │                          the message is held, not counted as a failure (see delivery.settle)
    └── PermanentError         never retry: ack, and publish a *.rejected / *.failed event
        ├── RejectedInput      the input itself is wrong; carries field errors
        ├── MalformedMessage   the bytes are no valid message of the subject's contract: there
        │                      is no request to answer, so the raw message is kept in the
        │                      dead-letter stream at once (never redelivered)
        └── UnknownTarget      the message names a cluster, node or command this deployment
                               does not know: dead-lettered at once with the reason, nothing stored
    (infrastructure errors)    redis ConnectionError / TimeoutError / BusyLoadingError, nats-py's
                               connection errors, OSError's connection errors, and a Redis in
                               failover (READONLY, MASTERDOWN replies): `is_unavailable` says so,
                               and they are treated as Unavailable
    (anything else)            a bug: nack with backoff, then dead-letter after the consumer's
                               max deliveries
"""
from __future__ import annotations

__all__ = [
    "BKEError", "MalformedMessage", "NotYetKnown", "PermanentError", "RejectedInput", "TemporaryError",
    "Unavailable", "UnknownTarget", "is_unavailable",
]


class BKEError(Exception):
    """Base of the errors the services raise on purpose."""


class TemporaryError(BKEError):
    def __init__(self, message: str, delay: float = 2.0):
        super().__init__(message)
        self.delay = delay


class NotYetKnown(TemporaryError):
    """Retry later, a bounded number of times: after `max_tries` deliveries the message is
    dead-lettered with this reason (e.g. a result whose command was never recorded)."""

    def __init__(self, message: str, delay: float = 1.0, max_tries: int = 10):
        super().__init__(message, delay)
        self.max_tries = max_tries


class Unavailable(BKEError):
    """The store or the bus cannot be reached now; nothing is wrong with the message."""


class PermanentError(BKEError):
    pass


class RejectedInput(PermanentError):
    def __init__(self, errors: list[tuple[str, str]], cluster: str | None = None):
        super().__init__("; ".join(f"{p}: {m}" for p, m in errors[:5]))
        self.errors = errors
        self.cluster = cluster


class MalformedMessage(PermanentError):
    pass


class UnknownTarget(PermanentError):
    """The message is about something this deployment never created: it can never succeed."""


# The clients' outage errors, by module and class name rather than by import: bke.core.errors is
# imported by pure cores and by the node agent, which must not pull in redis (import-linter).
# A subclass counts too (redis' BusyLoadingError, raised while the server loads its AOF, is a
# ConnectionError: redis/exceptions.py).
_OUTAGE_CLASSES: dict[str, frozenset[str]] = {
    # redis-py, when the server is down, slow, or still loading
    "redis.exceptions": frozenset({"ConnectionError", "TimeoutError", "ReadOnlyError"}),
    # nats-py, while the client is disconnected or reconnecting, or a PubAck never came
    # (nats/errors.py)
    "nats.errors": frozenset({"ConnectionClosedError", "ConnectionDrainingError", "ConnectionReconnectingError",
                              "NoServersError", "StaleConnectionError", "OutboundBufferLimitError", "TimeoutError"}),
    # JetStream's 503; and a publish no stream answered, which is what a stream electing a new
    # leader gives for a few seconds after a node of a NATS cluster is lost
    "nats.js.errors": frozenset({"ServiceUnavailableError", "NoStreamResponseError"}),
}


# A Redis failover (Sentinel) demotes the old primary: a write sent to it before the client moved
# on is refused with READONLY, and a Lua script's write comes back as a plain script error that
# carries the same READONLY (redis-py maps only a reply that starts with it to ReadOnlyError).
# MASTERDOWN: a replica cut off from its primary. Both last as long as the failover.
_OUTAGE_REPLIES = ("READONLY You can't write against a read only replica", "MASTERDOWN ")


def _is_outage_reply(exc: BaseException) -> bool:
    if not any(k.__module__ == "redis.exceptions" and k.__name__ == "ResponseError" for k in type(exc).__mro__):
        return False
    text = str(exc)
    return any(marker in text for marker in _OUTAGE_REPLIES)


def _is_outage_type(cls: type) -> bool:
    for klass in cls.__mro__:
        if klass is Unavailable or klass is ConnectionError:  # ours, and the socket's own (refused, reset)
            return True
        if klass.__name__ in _OUTAGE_CLASSES.get(klass.__module__, ()):
            return True
    return False


def is_unavailable(exc: BaseException) -> bool:
    """True for an outage of the store or the bus: the message is not at fault and must not be
    counted as a failed delivery. Looks through `raise ... from` chains (a wrapper of a redis
    ConnectionError is still an outage)."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if _is_outage_type(type(cur)) or _is_outage_reply(cur):
            return True
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return False
