"""Field errors: the unit every validation step returns, never raises or prints."""
from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, field_validator

__all__ = ["FieldError", "format_errors"]

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_MAX_CHARS = 2000  # a path or message quoting a huge key is cut, not printed whole


class FieldError(BaseModel):
    """One problem in the user's input, named by its field path (`nodes[2].spec.role[1]`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    path: str
    message: str

    @field_validator("path", "message")
    @classmethod
    def _one_readable_line(cls, text: str) -> str:
        r"""Paths and messages quote the user's keys and values: a key "\n" or "\x1b[2J" must not
        break the CLI's one-line `ERROR <path>: <message>` output or forge a line of it."""
        text = _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode(), text)
        return text if len(text) <= _MAX_CHARS else text[: _MAX_CHARS - 3] + "..."

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def format_errors(errors: list[FieldError]) -> list[str]:
    return [str(e) for e in errors]
