"""`bke pause NAME` and `bke resume NAME`: hold a cluster's operations (install, certificate
rotation, upgrade) after the step they are in, and let them go on (bke.contracts.pause).

The command returns once every service that runs operations has recorded it (one
`PauseChanged` from each), so that "paused" on the screen means no new step will be taken.
"""
from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Optional

import typer
from nats.errors import NoServersError
from rich.console import Console

from bke.adapters.bus import EventWatch
from bke.adapters.bus.connect import BusAccess, connect_nats
from bke.adapters.bus.streams import require_streams
from bke.contracts.pause import PAUSE_CLUSTER, PAUSE_OWNERS, PauseCluster, pause_subject

from .connect import resolve_nats
from .output import EXIT_FAILURE, EXIT_INVALID, die, error_lines, quiet_bus_errors, where

__all__ = ["register"]

ANSWER_TIMEOUT_S = 30.0
WORKDIR = typer.Option(None, "--workdir", help="a lab's work directory (its NATS and credentials)")
NATS = typer.Option(None, "--nats", help="NATS URL of a running deployment")


async def _send(nats: BusAccess | str, req: PauseCluster, timeout: float) -> dict[str, str]:
    """Publish the request; the services that recorded it, with when (only those that answered)."""
    nc = await connect_nats(nats, error_cb=quiet_bus_errors)
    seen: dict[str, str] = {}
    try:
        js = nc.jetstream()
        await require_streams(js)
        async with EventWatch(nc, [pause_subject(req.cluster)]) as watch:
            await js.publish(PAUSE_CLUSTER, req.to_bytes(), headers={"Nats-Msg-Id": f"pause:{req.request_id}"})
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            while set(PAUSE_OWNERS) - seen.keys():
                left = deadline - loop.time()
                if left <= 0:
                    break
                try:
                    ev = await watch.wait_for(lambda e: e.data.get("requestId") == req.request_id
                                              and e.data.get("service") not in seen, timeout=left)
                except TimeoutError:
                    break
                seen[ev.data["service"]] = ev.data.get("at", "")
    finally:
        await nc.close()
    return seen


def _run(name: str, paused: bool, reason: str, workdir: Optional[Path], nats_url: Optional[str]) -> None:
    try:
        req = PauseCluster(request_id=str(uuid.uuid4()), cluster=name, paused=paused, reason=reason)
    except ValueError as exc:
        die(f"NAME: {' '.join(str(exc).split())}", EXIT_INVALID)
    nurl = resolve_nats(workdir, nats_url)
    try:
        seen = asyncio.run(_send(nurl, req, ANSWER_TIMEOUT_S))
    except (OSError, NoServersError) as exc:
        die(f"cannot reach NATS at {where(nurl)}: {exc}", EXIT_FAILURE)
    missing = [s for s in PAUSE_OWNERS if s not in seen]
    if missing:
        error_lines([f"{', '.join(missing)} did not record the {'pause' if paused else 'resume'} of {name} within "
                     f"{ANSWER_TIMEOUT_S:.0f}s (is it running?); it takes effect when it does"])
        raise typer.Exit(EXIT_FAILURE)
    word = "paused: the step running finishes, no new one starts until `bke resume`" if paused else "resumed"
    Console().print(f"{name} {word} ({', '.join(sorted(seen))})", highlight=False)


def pause(
    name: str = typer.Argument(..., help="cluster name"),
    reason: str = typer.Option("", "--reason", help="why (kept with the pause, shown in the logs)"),
    workdir: Optional[Path] = WORKDIR,
    nats_url: Optional[str] = NATS,
) -> None:
    """Pause a cluster's operations after the step they are in."""
    _run(name, True, reason, workdir, nats_url)


def resume(
    name: str = typer.Argument(..., help="cluster name"),
    workdir: Optional[Path] = WORKDIR,
    nats_url: Optional[str] = NATS,
) -> None:
    """Let a paused cluster's operations go on."""
    _run(name, False, "", workdir, nats_url)


def register(app: typer.Typer) -> None:
    app.command("pause")(pause)
    app.command("resume")(resume)
