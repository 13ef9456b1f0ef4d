"""NATS adapters: stream table, delivery settlement, big-payload references."""
from .blobs import get_blob, put_blob
from .delivery import backoff_delay, settle
from .streams import OBJECT_BUCKET, STREAMS, StreamDef, ensure_streams
from .watch import EventWatch, Seen

__all__ = ["OBJECT_BUCKET", "STREAMS", "EventWatch", "Seen", "StreamDef", "backoff_delay", "ensure_streams", "get_blob", "put_blob", "settle"]
