"""JetStream streams as a table, and an idempotent `ensure_streams`.

Commands sit on a work-queue stream (a message is gone once one consumer acks it).
Events sit on a limits stream, because several services read the same event (a plan is
read by certs, renderer and dispatcher), each through its own durable consumer.

`max_consumers`: nats-server 2.15 caps every stream at 1000 consumers unless the stream sets a
limit itself (and -1 no longer means "unlimited"). BKE_AGENT holds one durable consumer per node
agent, so it declares its own limit; the others keep the server default.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import NotFoundError

from ..contracts import subjects as s

__all__ = ["STREAMS", "StreamDef", "ensure_streams", "OBJECT_BUCKET"]

log = logging.getLogger(__name__)
OBJECT_BUCKET = "bke-blobs"  # big payloads travel by reference (specRef)


@dataclass(frozen=True)
class StreamDef:
    name: str
    subjects: tuple[str, ...]
    retention: RetentionPolicy
    max_age_s: float
    summary: str
    max_consumers: int | None = None  # None: the server's default (1000 on nats-server 2.15)

    def config(self) -> StreamConfig:
        return StreamConfig(
            name=self.name,
            subjects=list(self.subjects),
            retention=self.retention,
            storage=StorageType.FILE,
            max_age=self.max_age_s,
            discard=DiscardPolicy.OLD,
            duplicate_window=120.0,
            max_consumers=self.max_consumers,
        )


DAY = 86400.0
AGENT_MAX_CONSUMERS = 100_000  # one durable per node agent, plus the dispatcher's
STREAMS: tuple[StreamDef, ...] = (
    StreamDef("BKE_COMMANDS", s.COMMAND_SUBJECTS, RetentionPolicy.WORK_QUEUE, 7 * DAY, "commands to the services"),
    StreamDef("BKE_EVENTS", s.EVENT_SUBJECTS, RetentionPolicy.LIMITS, 7 * DAY, "events, read by several services"),
    StreamDef("BKE_AGENT", s.AGENT_SUBJECTS, RetentionPolicy.LIMITS, 7 * DAY, "node agent commands, results, registrations",
              max_consumers=AGENT_MAX_CONSUMERS),
    StreamDef("BKE_DEADLETTER", (s.DEADLETTER + ".>",), RetentionPolicy.LIMITS, 30 * DAY, "messages given up on"),
)


async def ensure_streams(js: JetStreamContext, streams: tuple[StreamDef, ...] = STREAMS) -> None:
    """Create missing streams; bring existing ones to the declared subjects (idempotent)."""
    for d in streams:
        cfg = d.config()
        try:
            info = await js.stream_info(d.name)
        except NotFoundError:
            await js.add_stream(cfg)
            log.info("stream created", extra={"stream": d.name})
            continue
        drift = sorted(info.config.subjects or []) != sorted(cfg.subjects or [])
        if d.max_consumers is not None and info.config.max_consumers != d.max_consumers:
            drift = True
        if drift:
            await js.update_stream(cfg)
            log.info("stream updated", extra={"stream": d.name})
