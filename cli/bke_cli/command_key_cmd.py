"""`bke keys command-key`: a rollover of the command-signing key itself (not of its at-rest
encryption, which `bke keys rotate signing` re-encrypts), with an overlap window agents honour.

    bke keys command-key start --overlap 24h   a next key, sealed beside the current one; agents
                                               trust the current one until start + overlap once
                                               told of the next (a signed TrustCommandKey)
    bke keys command-key status                the rollover in progress, time left, and how many
                                               accepted agents took the next key
    bke keys command-key switch                the next key signs from now on (every dispatcher
                                               and upgrader replica follows without a restart);
                                               refused until every accepted agent took it
                                               (--force: anyway)
    bke keys command-key finish                the rollover record goes

Reached as the state's admin (`--workdir LAB`, or `--redis URL` / BKE_REDIS_URL) with the
`signing` at-rest key (the lab's, else BKE_KEY_FILE_SIGNING). Only fingerprints and public lines
are printed. The order and what each step means for agents: docs/keys.md and
bke.core.secrets.command_key_rollover.
"""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional, TypeVar

import typer
from redis.asyncio import Redis

from bke.adapters.state.command_key_rotation import (
    acknowledgements, finish_rollover, read_rollover, start_rollover, switch_rollover,
)
from bke.core.errors import TemporaryError
from bke.core.secrets.command_key_rollover import Rollover, RolloverError, parse_overlap

from .keys_cmd import REDIS, WORKDIR, _store
from .output import EXIT_FAILURE, EXIT_INVALID, die, warn_lines
from .state_cmd import key_box, resolve_access

__all__ = ["command_key_app"]

T = TypeVar("T")

command_key_app = typer.Typer(no_args_is_help=True,
                              help="Roll the command-signing key over: start, status, switch, finish.")


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _show(r: Rollover, now: datetime) -> None:
    left = r.seconds_left(now)
    typer.echo(f"rollover {r.previous_key_id} -> {r.next_key_id}: {r.stage}, started {r.started_at.isoformat()}")
    typer.echo(f"next key: {r.next_public_line}")
    typer.echo(f"agents trust {r.previous_key_id} until {r.previous_not_after.isoformat()} "
               + (f"({left / 3600:.1f} h left)" if left > 0 else "(ended)"))


def _admin(workdir: Path | None, redis_url: str | None, work: Callable[[Redis], Awaitable[T]]) -> T:
    """`work` as the state's admin; a refusal or a race ends the command with its reason."""
    try:
        return _store(resolve_access(workdir, redis_url), work)
    except TemporaryError as exc:
        die(f"{exc}", EXIT_FAILURE)


@command_key_app.command("start")
def start_cmd(overlap: str = typer.Option(..., "--overlap", help="how long agents keep trusting the current key "
                                                                "once told of the next (e.g. 24h, 2d)"),
              workdir: Optional[Path] = WORKDIR, redis_url: Optional[str] = REDIS) -> None:
    """Make the next command-signing key and start its overlap window."""
    try:
        overlap_s = parse_overlap(overlap)
    except RolloverError as exc:
        die(str(exc), EXIT_INVALID)
    box = key_box(workdir, "signing")
    assert box is not None
    now = _now()
    r = _admin(workdir, redis_url, lambda c: start_rollover(c, box, overlap_s, now))
    _show(r, now)
    typer.echo("the dispatcher now sends every accepted agent the announcement (signed by the current key); "
               "once `bke keys command-key status` counts them all, before the window ends: bke keys command-key switch")


@command_key_app.command("status")
def status_cmd(workdir: Optional[Path] = WORKDIR, redis_url: Optional[str] = REDIS) -> None:
    """The rollover in progress, if any."""
    r = _admin(workdir, redis_url, read_rollover)
    if r is None:
        typer.echo("no command-key rollover in progress")
        return
    _show(r, _now())
    if r.stage == "announcing":
        took, missing = _admin(workdir, redis_url, lambda c: acknowledgements(c, r))
        typer.echo(f"agents that took {r.next_key_id}: {len(took)} of {len(took) + len(missing)} accepted"
                   + (f"; not yet: {', '.join(missing[:20])}{' ...' if len(missing) > 20 else ''}" if missing else ""))


@command_key_app.command("switch")
def switch_cmd(workdir: Optional[Path] = WORKDIR, redis_url: Optional[str] = REDIS,
               force: bool = typer.Option(False, "--force", help="switch although some accepted agents have not "
                                                                "taken the next key (they refuse it until bootstrapped again)")
               ) -> None:
    """The next key becomes the one every signer uses, once every accepted agent took it."""
    box = key_box(workdir, "signing")
    assert box is not None
    now = _now()
    r0 = _admin(workdir, redis_url, read_rollover)
    if r0 is not None and r0.stage == "announcing":
        _, missing = _admin(workdir, redis_url, lambda c: acknowledgements(c, r0))
        if missing and not force:
            die(f"{len(missing)} accepted agent(s) have not taken {r0.next_key_id} yet ({', '.join(missing[:10])}"
                f"{' ...' if len(missing) > 10 else ''}): wait for the dispatcher's announcements, or --force", EXIT_INVALID)
    r = _admin(workdir, redis_url, lambda c: switch_rollover(c, box, now))
    _show(r, now)
    if r.seconds_left(now) <= 0:
        warn_lines([f"the overlap ended at {r.previous_not_after.isoformat()}: agents that took the announcement "
                    "refused the old key's commands since then; send them again"])
    typer.echo(f"signers use {r.next_key_id} within seconds; pin it for new agents: "
               "bke agent bootstrap --command-key-fingerprint (the dispatcher answers the new key)")


@command_key_app.command("finish")
def finish_cmd(workdir: Optional[Path] = WORKDIR, redis_url: Optional[str] = REDIS) -> None:
    """Forget the switched rollover (agents drop the old key at its end, or at a signed retire)."""
    r = _admin(workdir, redis_url, finish_rollover)
    typer.echo(f"rollover to {r.next_key_id} finished; agents refuse {r.previous_key_id} from "
               f"{r.previous_not_after.isoformat()} (or at once on a signed retire)")
