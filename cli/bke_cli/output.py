"""CLI-wide conventions: exit codes and error lines. Only the CLI prints."""
from __future__ import annotations

import sys
from enum import Enum
from typing import Iterable, NoReturn

__all__ = ["EXIT_OK", "EXIT_FAILURE", "EXIT_INVALID", "Fmt", "die", "error_lines", "quiet_bus_errors", "where"]

EXIT_OK = 0
EXIT_FAILURE = 1  # operational failure (a server down, an install that failed)
EXIT_INVALID = 2  # invalid input or a refused request


class Fmt(str, Enum):
    """`-o`: what every listing command prints, a table for people or JSON for programs."""

    table = "table"
    json = "json"


def error_lines(lines: Iterable[str]) -> None:
    for line in lines:
        print(f"ERROR {line}", file=sys.stderr)


def warn_lines(lines: Iterable[str]) -> None:
    for line in lines:
        print(f"WARNING {line}", file=sys.stderr)


def die(message: str, code: int = EXIT_FAILURE) -> NoReturn:
    error_lines([message])
    raise SystemExit(code)


async def quiet_bus_errors(exc: Exception) -> None:
    """nats-py's error callback for the CLI: a service logs each failed attempt, but the CLI
    says what came of them in one ERROR line (or one "waiting" line while it follows)."""


def where(access: object) -> str:
    """The NATS URL of a BusAccess (or a URL), for a message."""
    return str(getattr(access, "url", access))
