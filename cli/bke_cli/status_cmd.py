"""`bke status`, `bke retry`, `bke apply`: talk to a running deployment."""
from __future__ import annotations

import asyncio
import json
import time
import uuid
from enum import Enum
from pathlib import Path
from typing import Optional

import nats
import typer
from redis.asyncio import Redis
from rich.console import Console
from rich.table import Table

from bke.contracts.install import RETRY_REQUESTED, RetryRequested
from bke.state.install_view import install_status

from .connect import resolve_urls
from .follow import status_table, submit_and_follow
from .output import EXIT_FAILURE, EXIT_INVALID, die, error_lines
from .spec_input import plan_or_exit, read_spec_text

__all__ = ["register"]

WORKDIR = typer.Option(None, "--workdir", help="a lab's work directory")
NATS = typer.Option(None, "--nats", help="NATS URL (or BKE_NATS_URL)")
REDIS = typer.Option(None, "--redis", help="Redis URL (or BKE_REDIS_URL)")


class Fmt(str, Enum):
    table = "table"
    json = "json"


async def _status(redis_url: str, cluster: str) -> dict | None:
    r = Redis.from_url(redis_url)
    try:
        return await install_status(r, cluster)
    finally:
        await r.aclose()


def status(
    name: str = typer.Argument(..., help="cluster name"),
    output: Fmt = typer.Option(Fmt.table, "-o", "--output"),
    workdir: Optional[Path] = WORKDIR,
    nats_url: Optional[str] = NATS,
    redis_url: Optional[str] = REDIS,
) -> None:
    """Show the install's phases and nodes, from Redis."""
    _, rurl = resolve_urls(workdir, nats_url, redis_url)
    doc = asyncio.run(_status(rurl, name))
    if doc is None:
        die(f"cluster {name!r}: no install found", EXIT_INVALID)
    if output is Fmt.json:
        print(json.dumps({k: doc[k] for k in ("cluster", "status", "phases", "nodes", "addons", "health", "message")}, indent=2))
        return
    console = Console()
    console.print(status_table(doc))
    nodes = Table("node", "status", "step")
    for n in doc["nodes"]:
        nodes.add_row(n["hostname"], n["status"], n["step"] or "")
    console.print(nodes)


def retry(
    name: str = typer.Argument(..., help="cluster name"),
    nodes: Optional[str] = typer.Option(None, "--nodes", help="comma-separated hostnames (default: every failed node)"),
    workdir: Optional[Path] = WORKDIR,
    nats_url: Optional[str] = NATS,
    redis_url: Optional[str] = REDIS,
    follow: bool = typer.Option(True, help="follow the install afterwards"),
    timeout: float = typer.Option(1800.0, help="seconds to follow"),
) -> None:
    """Retry the failed phase of an install, without redoing succeeded work."""
    nurl, rurl = resolve_urls(workdir, nats_url, redis_url)
    doc = asyncio.run(_status(rurl, name))
    if doc is None:
        die(f"cluster {name!r}: no install found", EXIT_INVALID)
    failed = [n["hostname"] for n in doc["nodes"] if n["status"] == "Failed"]
    wanted = [n.strip() for n in nodes.split(",") if n.strip()] if nodes else []
    unknown = [n for n in wanted if n not in {x["hostname"] for x in doc["nodes"]}]
    if unknown:
        die(f"--nodes: unknown node(s) {', '.join(unknown)} in cluster {name}", EXIT_INVALID)
    if doc["status"] != "Failed":
        die(f"cluster {name!r} is {doc['status']}: nothing to retry", EXIT_INVALID)

    async def send() -> int:
        nc = await nats.connect(nurl)
        try:
            req = RetryRequested(request_id=str(uuid.uuid4()), cluster=name, nodes=wanted)
            await nc.jetstream().publish(RETRY_REQUESTED, req.to_bytes())
        finally:
            await nc.close()
        # the dispatcher takes the retry when it flips the install back to Running
        deadline = time.monotonic() + 60
        while (await _status(rurl, name) or {}).get("status") == "Failed":
            if time.monotonic() > deadline:
                error_lines([f"the retry of {name} was not picked up within 60 s; is the dispatcher running?"])
                return EXIT_FAILURE
            await asyncio.sleep(0.1)  # polling Redis under a deadline
        if not follow:
            return 0
        return await submit_and_follow(nurl, rurl, b"", name, timeout, Console(), submit=False)

    Console(stderr=True).print(f"retrying {', '.join(wanted or failed) or 'the failed phase'} of {name}")
    raise typer.Exit(asyncio.run(send()))


def apply(
    spec: Path = typer.Argument(...),
    workdir: Optional[Path] = WORKDIR,
    nats_url: Optional[str] = NATS,
    redis_url: Optional[str] = REDIS,
    timeout: float = typer.Option(3600.0, help="seconds to follow the install"),
) -> None:
    """Publish a request for a new cluster to a running deployment and follow it."""
    plan = plan_or_exit(spec)
    nurl, rurl = resolve_urls(workdir, nats_url, redis_url)
    doc = asyncio.run(_status(rurl, plan.cluster))
    if doc is not None and doc["status"] == "Succeeded":
        die(f"cluster {plan.cluster!r} already exists: changing a running cluster is not supported yet", EXIT_INVALID)
    code = asyncio.run(submit_and_follow(nurl, rurl, read_spec_text(spec), plan.cluster, timeout, Console()))
    raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    app.command("status")(status)
    app.command("retry")(retry)
    app.command("apply")(apply)
