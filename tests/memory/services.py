"""The services on the in-memory bus: each built by its own composition root (`create_service`),
so its wiring, handlers, subjects and stores are the real ones.

The seam: `make_service` (bke.adapters.bus.service) is kept, and only what it reaches outside
the process is swapped, for the duration of a test (pytest's monkeypatch):
- `nats_broker` gives a MemoryBroker (the broker's publish and its connection, the router's);
- `_check_streams_at` finds the streams declared (the router holds every stream of
  bke.adapters.bus.streams);
- `_probe_client` and bke.adapters.state.client's `Redis` give fakeredis clients, all on one
  FakeServer (with Lua through lupa: the stores' EVAL scripts run as they are).
And one thing of time: every reconcile loop (bke.adapters.runner.Runner) runs without its
coalescing window, a throughput measure for thousands of results that would only add 0.2 s to
each phase of a four-node cluster.
Nothing in production code knows about this tier.
"""
from __future__ import annotations

from typing import Any

import fakeredis
import pytest
from faststream.nats import NatsBroker

from bke.adapters.bus import service as service_module
from bke.adapters.runner import Runner
from bke.adapters.state import client as client_module

from .bus import MemoryNats, Router

__all__ = ["MemoryBroker", "NATS_URL", "REDIS_URL", "patch_outside"]

NATS_URL, REDIS_URL = "nats://memory:4222", "redis://memory:6379/0"


class MemoryBroker(NatsBroker):
    """FastStream's NatsBroker (the app takes only one), never connected: the part a Service uses
    (publish, the connection, start and stop) goes to the router."""

    def __init__(self, nc: MemoryNats):
        super().__init__(NATS_URL)
        self.memory = nc

    @property
    def connection(self) -> Any:
        return self.memory

    async def publish(self, message: Any = None, subject: str = "", headers: dict[str, str] | None = None,  # type: ignore[override]
                      stream: str | None = None, **_: Any) -> None:
        if stream is None:
            await self.memory.publish(subject, message, headers=headers)
        else:
            await self.memory.jetstream().publish(subject, message, headers=headers)

    async def start(self) -> None:
        return None

    async def stop(self, *_: Any) -> None:
        await self.memory.close()


class _FakeRedisFactory:
    """redis.asyncio.Redis as bke.adapters.state.client calls it: `from_url` gives a client of the shared FakeServer."""

    def __init__(self, server: fakeredis.FakeServer):
        self.server = server

    def from_url(self, url: str, **options: Any) -> fakeredis.FakeAsyncRedis:
        kept = {k: v for k, v in options.items() if k in ("decode_responses",)}
        return fakeredis.FakeAsyncRedis(server=self.server, **kept)


def patch_outside(monkeypatch: pytest.MonkeyPatch, router: Router, server: fakeredis.FakeServer) -> None:
    """Point every service made from now on at `router` and `server` (see the module docstring)."""
    redis = _FakeRedisFactory(server)

    async def streams_declared(settings: Any) -> None:
        return None

    monkeypatch.setattr(service_module, "nats_broker", lambda name, settings, connection: MemoryBroker(router.connect()))
    monkeypatch.setattr(service_module, "_check_streams_at", streams_declared)
    monkeypatch.setattr(service_module, "_probe_client", lambda settings: redis.from_url(REDIS_URL))
    monkeypatch.setattr(client_module, "Redis", redis)
    made = Runner.__init__

    def no_window(self: Runner, engine: Any, debounce_s: float = 0.0, paused: Any = None) -> None:
        made(self, engine, 0.0, paused)

    monkeypatch.setattr(Runner, "__init__", no_window)

