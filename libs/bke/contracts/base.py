"""Base of every bus message: frozen, strict about unknown fields, camelCase on the wire."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

__all__ = ["FailureKind", "Message", "ErrorItem"]

# "invalid": the input was refused (fix the spec; CLIs exit 2); "operational": something broke
# (fix it, then `bke retry`; CLIs exit 1)
FailureKind = Literal["invalid", "operational"]


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True)

    def to_bytes(self) -> bytes:
        return self.model_dump_json(by_alias=True).encode()


class ErrorItem(Message):
    path: str
    message: str
