"""Field errors: the unit every validation step returns, never raises or prints."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["FieldError", "format_errors"]


class FieldError(BaseModel):
    """One problem in the user's input, named by its field path (`nodes[2].spec.role[1]`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def format_errors(errors: list[FieldError]) -> list[str]:
    return [str(e) for e in errors]
