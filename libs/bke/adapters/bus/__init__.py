"""NATS adapters: stream table, delivery settlement, big-payload references.

The re-exports below load lazily (see `bke.core.lazy_exports`): `bke.adapters.bus.streams`, which the node
agent uses, must not pull in faststream through `bke.adapters.bus.delivery`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from bke.core.lazy_exports import load_export

if TYPE_CHECKING:
    from .blobs import get_blob, put_blob
    from .delivery import backoff_delay, settle
    from .streams import OBJECT_BUCKET, STREAMS, StreamDef, ensure_streams
    from .watch import EventWatch, Seen

_EXPORTS = {
    **dict.fromkeys(("get_blob", "put_blob"), "blobs"),
    **dict.fromkeys(("backoff_delay", "settle"), "delivery"),
    **dict.fromkeys(("OBJECT_BUCKET", "STREAMS", "StreamDef", "ensure_streams"), "streams"),
    **dict.fromkeys(("EventWatch", "Seen"), "watch"),
}

__all__ = ["OBJECT_BUCKET", "STREAMS", "EventWatch", "Seen", "StreamDef", "backoff_delay", "ensure_streams", "get_blob", "put_blob", "settle"]


def __getattr__(name: str) -> object:
    return load_export(__name__, _EXPORTS, name)
