"""What the fault tests share: a NATS + Redis pair of their own (they stop and restart it), the
dispatcher as an OS process (to SIGKILL it), and waits that poll under a deadline.

The seed cluster, the announcements of the other services and the null fleet are the
dispatcher integration tests' helpers (tests/integration/test_dispatcher.py)."""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Awaitable, Callable

import nats
from nats.aio.client import Client as NatsClient

from bke.contracts.health import ServiceHealth, health_subject
from bke.adapters.runtime import EmbeddedRuntime
from bke.adapters.runtime.processes import stop_pid
from bke.core.secrets import SECRET_KEY_ENV
from tests.integration.test_dispatcher import _announce, _ids, _null_fleet, _stored_cluster
from tests.trust_helpers import deployment_key

__all__ = ["DispatcherProcess", "GatedBackend", "_announce", "_ids", "gated_fleet", "_null_fleet", "_stored_cluster", "ack_pending",
           "eventually", "health_of", "restart_redis", "stop_redis"]

ROOT = Path(__file__).resolve().parents[2]


async def eventually(check: Callable[[], Awaitable[object]], timeout: float, what: str, every: float = 0.1) -> object:
    """Poll `check` until it returns something truthy, at most `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        got = await check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:.0f} s: {what}")
        await asyncio.sleep(every)  # the poll period, under the deadline above


async def health_of(nc: NatsClient, service: str) -> ServiceHealth | None:
    try:
        msg = await nc.request(health_subject(service), b"", timeout=2.0)
    except Exception:  # noqa: BLE001 - no answer yet is "unknown"
        return None
    return ServiceHealth.model_validate_json(msg.data)


async def ack_pending(nc: NatsClient, durable: str, stream: str = "BKE_AGENT_OUT") -> tuple[int, int]:
    """(delivered but not acknowledged, not yet delivered) of a consumer."""
    info = await nc.jetstream().consumer_info(stream, durable)
    return info.num_ack_pending or 0, info.num_pending or 0


def stop_redis(rt: EmbeddedRuntime) -> int:
    """Stop the runtime's Redis (its AOF stays); the port it had."""
    assert rt.info is not None
    port = int(rt.info.redis_url.rsplit(":", 1)[1].split("/")[0])
    stop_pid(rt.info.redis_pid, timeout=10.0)
    return port


def restart_redis(rt: EmbeddedRuntime, port: int) -> None:
    """Start Redis again on the same port and AOF (EmbeddedRuntime restarts what is missing)."""
    info = rt.ensure_started()
    assert info.redis_url.endswith(f":{port}/0"), f"Redis came back elsewhere: {info.redis_url}"


class DispatcherProcess:
    """`bke-dispatcher` as its own process, so that a test can SIGKILL it mid-handler."""

    def __init__(self, nats_url: str, redis_url: str, log: Path, **env: str):
        # BKE_SECRET_KEY_FILE (the `operator_box` fixture sets it): the dispatcher loads the
        # command-signing key from Redis with it, and signs nothing without it
        assert SECRET_KEY_ENV in os.environ or SECRET_KEY_ENV in env, f"{SECRET_KEY_ENV} unset: use the operator_box fixture"
        self.env = {**os.environ, "BKE_NATS_URL": nats_url, "BKE_REDIS_URL": redis_url, "BKE_DISPATCHER_MODE": "lab",
                    "BKE_DISPATCHER_HEALTH_INTERVAL_S": "0", "BKE_DISPATCHER_OWNER": "dispatcher-0", **env}
        self.log = log
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        out = open(self.log, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "bke_dispatcher.main"], env=self.env, cwd=ROOT,
                                     stdout=out, stderr=subprocess.STDOUT)
        out.close()

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


async def connect(url: str) -> NatsClient:
    return await nats.connect(url, connect_timeout=5, max_reconnect_attempts=-1, reconnect_time_wait=0.5)


class GatedBackend:
    """The null backend, except that steps whose id starts with `prefix` wait for `gate`: the
    test decides when those commands' results reach the bus (e.g. during an outage)."""

    kind = "lab"

    def __init__(self, prefix: str, gate: asyncio.Event, waiting: list[str]):
        from bke_agent.backends.null import NullBackend

        self.inner, self.prefix, self.gate, self.waiting = NullBackend(), prefix, gate, waiting

    async def start(self) -> None:
        await self.inner.start()

    async def stop(self) -> None:
        await self.inner.stop()

    async def execute(self, step, content):
        if step.id.startswith(self.prefix):
            self.waiting.append(step.id)
            await self.gate.wait()
        return await self.inner.execute(step, content)


async def gated_fleet(nc: NatsClient, nats_url: str, cluster: str, plan, prefix: str, gate: asyncio.Event,
                      waiting: list[str], r, box):
    """A fleet of agents for every node of `plan` whose `prefix` steps wait for `gate`; they run
    what the deployment's key signed (the key the dispatcher loads from Redis `r` with `box`)."""
    from bke_agent.fleet import Fleet
    from bke_agent.identity import AgentIdentity
    from bke_agent.journal import MemoryJournal
    from bke_agent.loop import AgentLoop
    from bke_agent.settings import AgentSettings
    from bke_agent.verify import CommandVerifier

    key = (await deployment_key(r, box)).verify_key
    js = nc.jetstream()
    base = AgentSettings(cluster=cluster, node="master1", backend="host", nats_url=nats_url, heartbeat_s=0)
    fleet = Fleet(nc, js)
    for n in plan.nodes:
        settings = base.model_copy(update={"node": n.hostname})
        fleet.add(AgentLoop(nc, js, settings, GatedBackend(prefix, gate, waiting), MemoryJournal(),  # type: ignore[arg-type]
                            AgentIdentity.ephemeral(), verifier=CommandVerifier(key, cluster, n.hostname)))
    return fleet
