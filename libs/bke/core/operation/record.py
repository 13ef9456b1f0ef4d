"""The typed record every operation on a running cluster keeps (a certificate rotation, a reset,
a join, a removal): who asked for it, how it stands, and one run per node it sends commands to.
Pure: no Redis, no bus, no clock (times are the caller's ISO strings).

    Record            what the loop needs of any operation's record (a protocol): the upgrader's
                      records keep a JSON form of their own, byte for byte, and meet it too
    OperationRecord   request id, cluster, started/finished, status, message; its JSON form
                      carries the version of its kind (bke.core.state.schema)
    NodeRun           one node's command: its id and status
    StepRun           ... that keeps the step that failed and its output (the reason shown)
    NodeProgress      how many of a record's node runs succeeded (a reset's, a rotation's)
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from collections.abc import Sequence
from typing import Any, ClassVar, Protocol, Self

from bke.contracts.statuses import OperationStatus, RunStatus
from bke.core.state.schema import SCHEMA_FIELD, check_readable, record_kind

__all__ = ["Ends", "NodeProgress", "NodeRun", "OperationRecord", "Record", "StepRun"]


class Record(Protocol):
    """An operation's record as the loop (bke.adapters.operation) and its store see it."""

    @property
    def request_id(self) -> str: ...

    @property
    def cluster(self) -> str: ...

    @property
    def status(self) -> OperationStatus: ...

    @property
    def message(self) -> str: ...

    @property
    def running(self) -> bool: ...

    def finish(self, status: OperationStatus, reason: str, at: str) -> None: ...

    def to_json(self) -> str: ...


class Ends:
    """How every record runs and ends, over its own `status`, `message` and `finished_at` fields
    (a mixin: the dataclass that uses it declares them, in the order its stored JSON keeps)."""

    status: OperationStatus
    message: str
    finished_at: str

    def __post_init__(self) -> None:
        self.status = OperationStatus(self.status)  # read back from JSON as a plain string

    @property
    def running(self) -> bool:
        return self.status == OperationStatus.RUNNING

    def finish(self, status: OperationStatus, reason: str, at: str) -> None:
        self.status, self.message, self.finished_at = status, reason, at


@dataclass(kw_only=True)
class OperationRecord(Ends):
    """The base of an operation's record. Subclasses name their `KIND` (bke.core.state.schema)
    and read their nested runs back in `from_doc`; JSON field names are the stored form."""

    KIND: ClassVar[str]

    request_id: str
    cluster: str
    started_at: str
    status: OperationStatus = OperationStatus.RUNNING
    finished_at: str = ""
    message: str = ""

    def to_json(self) -> str:
        return json.dumps({**asdict(self), SCHEMA_FIELD: record_kind(self.KIND).current})

    @classmethod
    def from_json(cls, raw: str | bytes) -> Self:
        doc = json.loads(raw)
        check_readable(cls.KIND, doc.pop(SCHEMA_FIELD, None), f"the {cls.KIND} record of {doc.get('cluster')}")
        return cls.from_doc(doc)

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> Self:
        """The record from its JSON fields (the version checked); a subclass builds its runs here."""
        return cls(**doc)


@dataclass(kw_only=True)
class NodeRun:
    hostname: str
    status: RunStatus = RunStatus.PENDING
    command_id: str = ""

    def __post_init__(self) -> None:
        self.status = RunStatus(self.status)


@dataclass(kw_only=True)
class StepRun(NodeRun):
    step: str = ""  # the step that failed
    stderr: str = ""  # its output (the end of it)


class NodeProgress:
    """A record's progress over its own `nodes` field, one run per node (a mixin, as `Ends`)."""

    nodes: Sequence[NodeRun]

    @property
    def done(self) -> int:
        """The nodes whose command succeeded."""
        return sum(n.status == RunStatus.SUCCEEDED for n in self.nodes)
