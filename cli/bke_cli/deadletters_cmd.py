"""`bke deadletters list` and `bke deadletters show`: what the services gave up on, read only.

As the operator identity (a lab's with `--workdir`, else BKE_NATS_CREDS), the only one allowed
to read the stream's messages; reading removes nothing (bke_cli.deadletters_client).

Reasons and subjects come from messages anyone on the bus may have sent: in the table and in
`show`, control characters are escaped before they reach a terminal (JSON escapes them itself),
and the original payload, which may be binary, is only ever written to a file of mode 0600.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Awaitable, Callable
from datetime import datetime
from enum import Enum
from pathlib import Path
from typing import Any, Optional, TypeVar

import typer
from nats.errors import NoServersError
from nats.errors import TimeoutError as NatsTimeout
from nats.js.api import StreamState
from nats.js.errors import APIError, NotFoundError
from rich.console import Console
from rich.table import Table
from rich.text import Text

from bke.adapters.auth.authority import write_private
from bke.adapters.auth.permissions import SERVICE_ROLES
from bke.adapters.bus.connect import BusAccess, connect_nats

from .connect import resolve_nats
from .deadletters_client import STREAM, DeadLetter, DeadLetterReader, DeadLettersRefused, Refusals
from .output import EXIT_FAILURE, EXIT_INVALID, Fmt, die, where

__all__ = ["letter_document", "letter_lines", "list_rows", "register"]

T = TypeVar("T")
REASON_WIDTH = 60  # the table's reason column; `show` and `-o json` give the whole reason
COLUMNS = ("seq", "time", "service", "subject", "deliveries", "reason", "payload")

deadletters_app = typer.Typer(no_args_is_help=True, add_completion=False,
                              help=f"What the services gave up on (stream {STREAM}): list them, show one. "
                                   "Read only: nothing is acked or removed.")
WORKDIR = typer.Option(None, "--workdir", help="a lab's work directory (its NATS and its operator identity)")
NATS = typer.Option(None, "--nats", help="NATS URL (or BKE_NATS_URL; the operator's creds: BKE_NATS_CREDS)")



class ShowFmt(str, Enum):
    text = "text"
    json = "json"


def _printable(text: str) -> str:
    """`text` with control characters escaped (`\\x1b`, `\\n`): safe to print on a terminal."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


def _when(t: datetime | None) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ") if t else ""


def _reason(d: DeadLetter) -> str:
    return (d.reason or "") if d.unreadable is None else f"unreadable: {d.unreadable}"


def list_rows(letters: list[DeadLetter], width: int = REASON_WIDTH) -> list[tuple[str, ...]]:
    """The table's rows (COLUMNS), printable: the reason cut to `width`, the payload's size."""
    return [(str(d.seq), _when(d.time), _printable(d.service), _printable(d.subject or ""),
             "" if d.deliveries is None else str(d.deliveries), _short(_printable(_reason(d)), width),
             "" if d.payload_size is None else f"{d.payload_size} B") for d in letters]


def letter_document(d: DeadLetter) -> dict[str, Any]:
    """One dead letter for `-o json`: every field, the reason whole, the payload's size (and, for
    `show`, its SHA-256), never the payload itself."""
    doc: dict[str, Any] = {"sequence": d.seq, "time": _when(d.time) or None, "service": d.service,
                           "subject": d.subject, "deliveries": d.deliveries, "reason": d.reason,
                           "payloadBytes": d.payload_size}
    if d.unreadable is not None:
        doc["unreadable"] = d.unreadable
    if d.payload is not None:
        doc["payloadSha256"] = hashlib.sha256(d.payload).hexdigest()
    return doc


def letter_lines(d: DeadLetter, payload_out: Path | None = None) -> list[str]:
    """`show`'s text: one printable line per field, the reason whole."""
    lines = [f"sequence:    {d.seq}", f"time:        {_when(d.time)}", f"service:     {_printable(d.service)}"]
    if d.unreadable is not None:
        return [*lines, f"unreadable:  {_printable(d.unreadable)}"]
    if d.body_service is not None and d.body_service != d.service:  # the body says otherwise: show both
        lines.append(f"body says:   service {_printable(d.body_service)}")
    lines += [f"subject:     {_printable(d.subject or '')}", f"deliveries:  {d.deliveries}"]
    if d.payload_size is not None:
        digest = f", sha256 {hashlib.sha256(d.payload).hexdigest()}" if d.payload is not None else ""
        where_to = f"written to {payload_out}" if payload_out else "--payload-out FILE writes it"
        lines.append(f"payload:     {d.payload_size} bytes{digest} ({where_to})")
    return [*lines, f"reason:      {_printable(d.reason or '')}"]


def _read(access: BusAccess, work: Callable[[DeadLetterReader], Awaitable[T]]) -> T:
    """`work` over one connection as the resolved identity; every failure one ERROR line."""
    async def run() -> T:
        refusals = Refusals()
        nc = await connect_nats(access, name="bke-cli", error_cb=refusals.note)
        try:
            return await work(DeadLetterReader(nc, refusals))
        finally:
            await nc.close()

    try:
        return asyncio.run(run())
    except DeadLettersRefused:
        die(f"refused (permissions violation): this identity may not read {STREAM}'s messages; "
            "the operator identity may", EXIT_INVALID)
    except NotFoundError:  # the stream's info: the deploy step never ran
        die(f"stream {STREAM}: missing; declare the streams (`bke streams ensure`)", EXIT_FAILURE)
    except (NatsTimeout, APIError) as exc:  # before OSError: nats-py's timeout is one
        die(f"JetStream at {where(access)}: no answer about {STREAM}: {type(exc).__name__}: {exc}", EXIT_FAILURE)
    except (OSError, NoServersError) as exc:
        die(f"cannot reach NATS at {where(access)}: {exc}", EXIT_FAILURE)


@deadletters_app.command("list")
def list_letters(
    service: Optional[str] = typer.Option(None, "--service", help=f"only this service's ({', '.join(SERVICE_ROLES)})"),
    last: int = typer.Option(20, "--last", min=1, max=1000, help="how many, the newest first"),
    output: Fmt = typer.Option(Fmt.table, "-o", "--output", help="a table (reasons cut), or JSON (reasons whole)"),
    workdir: Optional[Path] = WORKDIR,
    nats_url: Optional[str] = NATS,
) -> None:
    """The newest dead letters, newest first: sequence, time, service, the original subject,
    deliveries, reason (cut in the table, whole with `-o json`) and the payload's size."""
    if service is not None and service not in SERVICE_ROLES:
        die(f"--service: {service!r} is no BKE service; one of {', '.join(SERVICE_ROLES)}", EXIT_INVALID)
    letters = _read(resolve_nats(workdir, nats_url), lambda r: r.newest(last, service))
    if output is Fmt.json:
        print(json.dumps([letter_document(d) for d in letters], indent=2))
        return
    console = Console()
    if not letters:
        console.print(f"no dead letters{f' of {service}' if service else ''}", highlight=False)
        return
    table = Table(*COLUMNS)
    for row in list_rows(letters):
        table.add_row(*(Text(cell) for cell in row))  # Text: a reason's `[...]` is no rich markup
    console.print(table)


@deadletters_app.command("show")
def show(
    seq: int = typer.Argument(..., min=1, help="the dead letter's sequence (`bke deadletters list`)"),
    payload_out: Optional[Path] = typer.Option(
        None, "--payload-out", dir_okay=False, help="write the original payload to this file (mode 0600)"),
    output: ShowFmt = typer.Option(ShowFmt.text, "-o", "--output", help="one field a line, or a JSON document"),
    workdir: Optional[Path] = WORKDIR,
    nats_url: Optional[str] = NATS,
) -> None:
    """One dead letter in full. The original payload is never printed (it may be binary):
    `--payload-out FILE` writes it."""
    access = resolve_nats(workdir, nats_url)

    async def one(reader: DeadLetterReader) -> tuple[DeadLetter | None, StreamState | None]:
        letter = await reader.one(seq)
        return letter, (await reader.state() if letter is None else None)  # what it holds, for the error

    letter, state = _read(access, one)
    if letter is None:
        held = f"it holds {state.first_seq} to {state.last_seq}" if state and state.messages else "it is empty"
        die(f"dead letter {seq}: none in {STREAM} ({held}; `bke deadletters list` shows them)", EXIT_INVALID)
    if payload_out is not None:
        if letter.payload is None:
            die(f"dead letter {seq}: no payload to write ({letter.unreadable})", EXIT_INVALID)
        try:
            write_private(payload_out, letter.payload)
        except OSError as exc:
            die(f"--payload-out: {payload_out}: {exc.strerror or exc}", EXIT_INVALID)
    if output is ShowFmt.json:
        print(json.dumps(letter_document(letter), indent=2))
        return
    for line in letter_lines(letter, payload_out):
        print(line)


def register(app: typer.Typer) -> None:
    app.add_typer(deadletters_app, name="deadletters")
