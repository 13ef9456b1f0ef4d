"""`bke-agent`: the node agent.

    bke-agent init    create the agent's key pair if missing; print "bke-agent-x25519 <base64>"
    bke-agent run     consume this node's commands until SIGTERM (the default)

Configuration is the environment (see `settings`): BKE_AGENT_CLUSTER, BKE_AGENT_NODE,
BKE_AGENT_BACKEND (host|lab), BKE_AGENT_ROOT, BKE_AGENT_IP, BKE_AGENT_STATE_DIR, BKE_NATS_URL,
BKE_AGENT_HEARTBEAT_S, ... Logs are JSON lines on stderr; stdout carries only `init`'s output.

Exit codes: 0 stopped by a signal; 2 bad configuration; 3 another agent holds this state
directory (systemd restarts the unit after RestartSec); 75 (RESTART_EXIT_CODE) an UpdateAgent
step installed a new agent: its launcher (`bke-agent-launch`) starts it. While another connection still consumes
this node's commands (a crashed node's stale connection), `run` waits and retries.
"""
from __future__ import annotations

import argparse
import asyncio
import fcntl
import logging
import os
import signal
import sys
from pathlib import Path
from typing import IO

from nats.aio.client import Client as NatsClient
from nats.js.errors import NotFoundError
from pydantic import ValidationError

from bke.adapters.bus.connect import BusAccess, connect_nats
from bke.contracts.agent import RESTART_EXIT_CODE
from bke.adapters.logs import setup_logging
from bke.core.pythons import python_problem
from bke.core.secrets.signing import SigningKeyError

from .backends import RestoreReceiver, SnapshotTaker, make_backend
from .binding import DiskServed
from .command_keys import AgentKeyring
from .executor import Executor
from .identity import AgentIdentity
from .journal import DiskJournal
from .loop import AgentConflict, AgentLoop
from .renewal import IdentityRenewal
from .selfupdate import SelfUpdater
from .settings import AgentSettings
from .venvs import confirm
from .verify import CommandVerifier, NoCommandKey, load_command_key
from .version import RUNNING_VERSION

__all__ = ["main"]

log = logging.getLogger("bke.agent")
CONNECT_BACKOFF_S = (0.5, 1.0, 2.0, 5.0)
CONFLICT_RETRY_S = 5.0
LAUNCHED_ENV = "BKE_AGENT_LAUNCHED"  # set by bke-agent-launch: this agent may update itself


def _lock(state_dir: Path) -> IO[bytes]:
    """One agent per state directory: a second one would run the same commands concurrently."""
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    f = open(state_dir / "agent.lock", "wb")  # noqa: SIM115 - held for the life of the process
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        raise AgentConflict(f"another bke-agent holds {state_dir}/agent.lock") from None
    return f


async def _connect(access: BusAccess, stop: asyncio.Event, lost: asyncio.Event | None = None) -> NatsClient | None:
    """Connect, retrying with back-off until connected or asked to stop (NATS may start later).

    `lost` is set when the server ends the connection for good. nats-py reconnects after an
    outage but closes for good on any server `-ERR` but a permissions one (nats/aio/client.py
    `_process_err`), which is what a revoked or rotated identity gets ("User Authentication
    Revoked"): the agent then exits non-zero and systemd (`Restart=always`) starts it again with
    whatever creds file the node now holds."""
    attempt = 0

    async def on_closed() -> None:
        if lost is not None and not stop.is_set():
            lost.set()
            stop.set()

    while not stop.is_set():
        try:
            return await connect_nats(access, name="bke-agent", closed_cb=on_closed)
        except Exception as exc:  # noqa: BLE001 - any connect failure is retried
            delay = CONNECT_BACKOFF_S[min(attempt, len(CONNECT_BACKOFF_S) - 1)]
            log.warning("cannot connect to NATS (%s); retrying in %.1fs", type(exc).__name__, delay)
            attempt += 1
            try:
                await asyncio.wait_for(stop.wait(), delay)
            except TimeoutError:
                pass
    return None


async def _start_when_free(agent: AgentLoop, stop: asyncio.Event) -> bool:
    """Start; while another connection still holds this node's consumer, wait and retry.

    After a node crashed, the server keeps its old connection (and so the consumer's binding)
    until its pings time out; the restarted agent waits that out instead of failing.
    """
    while not stop.is_set():
        try:
            await agent.start()
            return True
        except (AgentConflict, NotFoundError) as exc:  # NotFoundError: no BKE_AGENT stream yet
            log.warning("%s; retrying in %.0fs", exc, CONFLICT_RETRY_S,
                        extra={"cluster": agent.cluster, "node": agent.node})
            try:
                await asyncio.wait_for(stop.wait(), CONFLICT_RETRY_S)
            except TimeoutError:
                pass
    return False


async def _renew_identity(nc: NatsClient, settings: AgentSettings, stop: asyncio.Event) -> None:
    """Its JWT renewed in the last third of its life, for the same key (bke_agent.renewal), until
    `stop`; nothing without a creds file (a server without authentication) or with the check off."""
    if settings.nats_creds is None or settings.renew_check_s == 0:
        return
    await IdentityRenewal(nc, settings.nats_creds, settings.cluster, settings.node).run(stop, settings.renew_check_s)


async def run(settings: AgentSettings) -> int:
    ids = {"cluster": settings.cluster, "node": settings.node}
    if not settings.nats_url:
        log.error("BKE_NATS_URL is not set", extra=ids)
        return 2
    state = settings.state_path
    lock = _lock(state)
    try:
        try:
            key = load_command_key(settings.command_key, state)
            keys = AgentKeyring.load(key, state)  # a rollover's keyring, when one reached this agent
        except (NoCommandKey, SigningKeyError) as exc:
            log.error("%s", exc, extra=ids)  # it would refuse every command: say so at start
            return 2
        identity, created = AgentIdentity.load_or_create(state)
        if created:
            log.info("agent key created", extra={**ids, "agent_id": identity.agent_id})
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        lost = asyncio.Event()
        nc = await _connect(settings.bus, stop, lost)
        if nc is None:
            return 0
        try:
            js = nc.jetstream()
            # The deploy step declares the streams (bke.adapters.bus.streams), never an agent (its
            # permissions name only its own consumer): `_start_when_free` waits for the stream.
            snapshots = SnapshotTaker(js, state / "snapshots", settings.cluster, settings.node, identity)
            restores = RestoreReceiver(nc, state / "restore", settings.cluster, settings.node, identity)
            backend = make_backend(settings, snapshots, restores)
            updater = SelfUpdater(state, sys.prefix, RUNNING_VERSION, launched=os.environ.get(LAUNCHED_ENV) == "1")
            agent = AgentLoop(nc, js, settings, backend,
                              DiskJournal(state, keep_days=settings.journal_keep_days), identity,
                              verifier=CommandVerifier(key, settings.cluster, settings.node, keys),
                              executor=Executor(backend, identity, updater=updater, keys=keys), served=DiskServed(state))
            agent.on_restart = stop.set
            if not await _start_when_free(agent, stop):
                return 1 if lost.is_set() else 0
            confirm(state, RUNNING_VERSION)  # it came up: a launcher watching a new version keeps it
            renewing = asyncio.create_task(_renew_identity(nc, settings, stop), name="identity-renewal")
            await stop.wait()
            renewing.cancel()  # a request under way is not waited for: asked again at the next start
            if agent.restart_requested:
                log.info("exiting to be started again in the new agent's venv", extra=ids)
                await agent.stop(grace=0)
                return RESTART_EXIT_CODE
            if lost.is_set():
                log.error("NATS closed this agent's connection for good (its identity revoked or rotated?); "
                          "exiting to be restarted with the node's creds file", extra=ids)
                await agent.stop(grace=0)
                return 1
            log.info("stopping on signal", extra=ids)
            await agent.stop()
        finally:
            await nc.close()
        return 0
    finally:
        lock.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bke-agent", description="BKE node agent")
    parser.add_argument("command", nargs="?", default="run", choices=("run", "init"))
    args = parser.parse_args(argv)
    if problem := python_problem(sys.version_info):  # pip's Requires-Python is not the only way in
        print(f"bke-agent: {problem}", file=sys.stderr)
        return 2
    setup_logging("agent")
    for noisy in ("httpx", "httpcore"):  # one INFO line per health poll otherwise
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        settings = AgentSettings()
    except ValidationError as exc:
        for err in exc.errors(include_url=False):
            where = f"BKE_AGENT_{'_'.join(str(p) for p in err['loc']).upper()}: " if err["loc"] else ""
            log.error("bad configuration: %s%s", where, err["msg"].removeprefix("Value error, "))
        return 2
    if args.command == "init":
        identity, _ = AgentIdentity.load_or_create(settings.state_path)
        print(identity.public_line)  # the one line `bke agent bootstrap` reads back
        return 0
    try:
        return asyncio.run(run(settings))
    except AgentConflict as exc:
        log.error("%s", exc, extra={"cluster": settings.cluster, "node": settings.node})
        return 3


if __name__ == "__main__":
    sys.exit(main())
