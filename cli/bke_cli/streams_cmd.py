"""`bke streams ensure` and `bke streams check`: the deploy step that declares BKE's JetStream
streams and object buckets, and a read-only check of them.

Only this step declares (bke.adapters.bus.streams): it runs as the deploy-time `streams` identity
(`--creds`, or BKE_NATS_CREDS; a lab's `creds/streams.creds` with `--workdir`), which may create
and update the declared streams and nothing else (bke.adapters.auth.jetstream_grants). The services check
what they find at start and refuse to start on a missing or changed stream. Run it at install,
after an upgrade of BKE, and whenever a service refuses to start on a stream's config: it puts
the declared config back (a stream someone sealed stays refused; it must be recreated).
"""
from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Optional

import typer
from nats.errors import NoServersError
from rich.console import Console

from bke.adapters.auth.permissions import inbox_prefix
from bke.adapters.bus.connect import BusAccess
from bke.adapters.bus.declare import declare
from bke.lab.identities import creds_path

from .connect import resolve_nats
from .output import EXIT_FAILURE, EXIT_INVALID, die, error_lines, where

__all__ = ["register"]

streams_app = typer.Typer(no_args_is_help=True, add_completion=False,
                          help="JetStream streams and buckets: declare them (deploy time) or check them.")
WORKDIR = typer.Option(None, "--workdir", help="a lab's work directory (its NATS and its `streams` identity)")
NATS = typer.Option(None, "--nats", help="NATS URL of a deployment (or BKE_NATS_URL)")
CREDS = typer.Option(None, "--creds", help="the `streams` identity's creds file (or BKE_NATS_CREDS)")
CLUSTERS = typer.Option(None, "--clusters", min=1, envvar="BKE_JETSTREAM_CLUSTERS",
                        help="how many clusters to size the streams for (bke.adapters.bus.quotas; default: 1, or keep the size)")
REPLICAS = typer.Option(None, "--replicas", min=1, max=5,
                        help="replicas per stream on a NATS cluster (default: create with 1, keep what exists)")


def _access(workdir: Optional[Path], nats_url: Optional[str], creds: Optional[Path]) -> BusAccess:
    access = resolve_nats(workdir, nats_url)
    if creds is None and workdir is not None:
        lab_creds = creds_path(workdir.resolve(), "streams")
        if not lab_creds.exists() and access.creds is not None:
            die(f"{lab_creds}: the lab has no `streams` identity yet (`bke identities provision streams --workdir {workdir}`)",
                EXIT_INVALID)
        creds = lab_creds if lab_creds.exists() else None
    if creds is None:
        return access
    if not creds.is_file():
        die(f"--creds: {creds}: no such file", EXIT_INVALID)
    return BusAccess(access.url, creds, inbox_prefix("streams"), access.tls_ca)


def _report(access: BusAccess, replicas: int | None, change: bool, clusters: int | None) -> None:
    try:
        problems = asyncio.run(declare(access, replicas, change, clusters))
    except (OSError, NoServersError) as exc:
        die(f"cannot reach NATS at {where(access)}: {exc}", EXIT_FAILURE)
    if problems:
        error_lines(problems)
        raise typer.Exit(EXIT_FAILURE)
    Console().print("streams and buckets as declared", highlight=False)


@streams_app.command("ensure")
def ensure(workdir: Optional[Path] = WORKDIR, nats_url: Optional[str] = NATS, creds: Optional[Path] = CREDS,
           replicas: Optional[int] = REPLICAS, clusters: Optional[int] = CLUSTERS) -> None:
    """Create the missing streams and buckets and put the declared config back (idempotent)."""
    _report(_access(workdir, nats_url, creds), replicas, True, clusters)


@streams_app.command("check")
def check(workdir: Optional[Path] = WORKDIR, nats_url: Optional[str] = NATS, creds: Optional[Path] = CREDS,
          replicas: Optional[int] = REPLICAS, clusters: Optional[int] = CLUSTERS) -> None:
    """Say what differs from the declared streams and buckets (exit 1 if anything does); changes nothing."""
    _report(_access(workdir, nats_url, creds), replicas, False, clusters)


def register(app: typer.Typer) -> None:
    app.add_typer(streams_app, name="streams")
