"""Base of every bus message: frozen, strict about unknown fields, camelCase on the wire."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, model_validator
from pydantic.alias_generators import to_camel

__all__ = ["FailureKind", "MESSAGE_SCHEMA", "Message", "ErrorItem", "OneSpecSource", "OperationChanged", "SCHEMA_HEADER",
           "changed_subject", "schema_headers", "without_none"]

# The form of every message body, in a header beside it (the subject's `bke.v1` names the
# subject space, not the body's form: a new body form need not rename every subject). A message
# without the header was written before messages carried one: version 0, the same form as 1.
# Who reads it, converts an older one or refuses a newer one: bke.adapters.bus.message_version.
SCHEMA_HEADER = "bke-schema"
MESSAGE_SCHEMA = 1


def schema_headers(headers: dict[str, str] | None = None) -> dict[str, str]:
    """`headers` plus this code's message version: what every publisher sends."""
    return {**(headers or {}), SCHEMA_HEADER: str(MESSAGE_SCHEMA)}

def without_none(data: dict[str, Any], model: BaseModel, fields: tuple[str, ...]) -> dict[str, Any]:
    """`data` (a dump of `model`) without those of `fields` that are None. For an optional field
    added to a message without a new message form (MESSAGE_SCHEMA): left out of the body when
    unset, a reader of the previous release (which forbids unknown fields) still reads every
    message that does not use it - an agent not yet updated still takes its UpdateAgent."""
    for name in fields:
        if getattr(model, name) is None:
            data.pop(name, None)
            data.pop(to_camel(name), None)
    return data


# "invalid": the input was refused (fix the spec; CLIs exit 2); "operational": something broke
# (fix it, then `bke retry`; CLIs exit 1)
FailureKind = Literal["invalid", "operational"]


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True)

    def to_bytes(self) -> bytes:
        return self.model_dump_json(by_alias=True).encode()


class OneSpecSource(Message):
    """A request that carries a spec inline (`spec`) or, too large for one message, by reference
    (`specRef` = `<bucket>/<key>` in the JetStream object store): exactly one of the two. The
    fields are each request's own (their limits differ); no field here, so none moves on the wire."""

    if TYPE_CHECKING:  # declared by each request, not here (pydantic reads no annotation of this block)
        spec: str | None
        spec_ref: str | None

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        if (self.spec is None) == (self.spec_ref is None):
            raise ValueError("exactly one of 'spec' and 'specRef' must be given")
        return self


class OperationChanged(Message):
    """An operation's `<kind>.changed` event: the cluster, when, and, in a field of each kind's
    own, the operation's whole view (so a reader that comes late misses nothing; the CLI follows
    every operation on these, bke_cli.follow). These two fields come first on the wire."""

    cluster: str
    at: str


def changed_subject(kind: str, cluster: str) -> str:
    """Where an operation of `kind` on `cluster` publishes its `OperationChanged` events
    (`bke.v1.<kind>.<cluster>.changed`)."""
    return f"bke.v1.{kind}.{cluster}.changed"


class ErrorItem(Message):
    path: str
    message: str
