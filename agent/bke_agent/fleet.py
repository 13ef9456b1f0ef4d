"""Many agents in one process, sharing one NATS connection.

Why: the install benchmark drives thousands of nodes from one machine. Each agent of a fleet
is a real `AgentLoop` (its own durable consumer, journal, results, acks); a fleet only
starts them with bounded concurrency (consumer creation is one JetStream API call per agent,
and the server handles them best a few dozen at a time), lets a bounded number handle a command
at once (HANDLING), and stops them together.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from pathlib import Path

from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext

from bke.core.secrets.signing import CommandVerifyKey

from .backends.null import NullBackend
from .binding import DiskServed, MemoryServed, ServedMemory
from .identity import AgentIdentity
from .journal import DiskJournal, Journal, MemoryJournal
from .loop import AgentLoop
from .settings import AgentSettings
from .trace import CommandTrace
from .command_keys import AgentKeyring
from .verify import CommandVerifier

__all__ = ["Fleet", "HANDLING", "SETUP_CONCURRENCY"]

SETUP_CONCURRENCY = 64  # consumer creations in flight; measured best on a 2-core box
# Commands handled at once across the fleet. Why: the agents share one process's CPU, and a
# phase sends every node its command at once. Ten thousand handled side by side each waited for
# the other handlers' turns before its result's PubAck was taken in: past 30 s under load the
# publish timed out and the command came back for its ack wait (5,903 replays in one install).
HANDLING = 64


class Fleet:
    def __init__(self, nc: NatsClient, js: JetStreamContext, *, concurrency: int = SETUP_CONCURRENCY) -> None:
        self.nc, self.js, self.concurrency = nc, js, concurrency
        self.loops: dict[str, AgentLoop] = {}
        self.setup_s: float | None = None  # how long `start` took (consumers + registrations)

    @classmethod
    def null(cls, nc: NatsClient, js: JetStreamContext, base: AgentSettings, nodes: Iterable[str], *,
             command_key: CommandVerifyKey, state_root: Path | None = None, fsync: bool = True,
             concurrency: int = SETUP_CONCURRENCY, trace: CommandTrace | None = None) -> Fleet:
        """A fleet of NullBackend agents for `nodes` of `base.cluster`: journals on disk under
        `state_root/<node>` (as the real agent keeps them), or in memory when it is None. They
        run only commands signed with `command_key`; their keys are in `identities()` for
        provisioning. `trace`: told every command and result (bke_agent.trace)."""
        fleet = cls(nc, js, concurrency=concurrency)
        gate = asyncio.Semaphore(HANDLING)
        for node in nodes:
            settings = base.model_copy(update={"node": node})
            journal: Journal = MemoryJournal() if state_root is None else DiskJournal(
                state_root / node, fsync=fsync, keep_days=settings.journal_keep_days)
            served: ServedMemory = MemoryServed() if state_root is None else DiskServed(state_root / node, fsync=fsync)
            fleet.add(AgentLoop(nc, js, settings, NullBackend(), journal, AgentIdentity.ephemeral(),
                                verifier=CommandVerifier(command_key, settings.cluster, node, AgentKeyring.load(
                                    command_key, None if state_root is None else state_root / node, fsync)),
                                served=served, gate=gate, trace=trace))
        return fleet

    def identities(self) -> dict[str, AgentIdentity]:
        """node -> its agent's identity (what provisioning records)."""
        return {node: loop.identity for node, loop in self.loops.items()}

    def add(self, loop: AgentLoop) -> None:
        self.loops[loop.node] = loop

    async def start(self) -> float:
        """Start every agent (at most `concurrency` at once); return the seconds it took."""
        sem = asyncio.Semaphore(self.concurrency)

        async def one(loop: AgentLoop) -> None:
            async with sem:
                await loop.start()

        t0 = time.perf_counter()
        await asyncio.gather(*(one(loop) for loop in self.loops.values()))
        self.setup_s = time.perf_counter() - t0
        return self.setup_s

    async def stop(self, grace: float = 5.0) -> None:
        await asyncio.gather(*(loop.stop(grace) for loop in self.loops.values()), return_exceptions=True)

    @property
    def executed(self) -> int:
        return sum(loop.executed for loop in self.loops.values())

    @property
    def replayed(self) -> int:
        return sum(loop.replayed for loop in self.loops.values())
