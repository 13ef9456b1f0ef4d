"""The one loop of the operations on a running cluster, and their records in Redis: an operation
(bke.core.operation: a typed record, a pure decide and fold) subclasses `OperationLoop` with its
table of carriers and its `changed` event, keeps its record in a `RecordStore`, and is driven
with the others by `Operations`."""
from .driven import Driven, Operations
from .loop import Carrier, EndEvent, OperationLoop, Publish
from .store import RecordStore

__all__ = ["Carrier", "Driven", "EndEvent", "OperationLoop", "Operations", "Publish", "RecordStore"]
