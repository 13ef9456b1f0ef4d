"""One Prometheus registry per service (not the process-wide default: tests build several
services in one process, and a second registration of a name in one registry is an error).

The bus figures are kept by the consumers (`observe`); the domain figures (clusters, nodes,
certificates, upgrades) are read when scraped: each service adds `refreshers`, async functions
that set its gauges from its own read model, run before each scrape with a bound so that a
store outage makes a scrape stale, never hung.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Awaitable, Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

__all__ = ["REFRESH_TIMEOUT_S", "ServiceMetrics"]

log = logging.getLogger("bke.adapters.http.metrics")
REFRESH_TIMEOUT_S = 5.0  # a scrape waits this long for the domain figures, then serves what it has

# Handler latencies: from a Redis round trip to an etcd snapshot step's minutes.
_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


class ServiceMetrics:
    def __init__(self, service: str):
        self.service = service
        self.registry = CollectorRegistry(auto_describe=True)
        # `subject` is the consumer's filter subject (`bke.v1.agent.*.result`), never the
        # concrete one: a label per node or cluster would grow without bound at 10,000 nodes.
        self.handled = Counter("bke_messages_handled", "Messages handled without an error, per consumer subject",
                               ["service", "subject"], registry=self.registry)
        self.failed = Counter("bke_messages_failed", "Messages whose handler raised (retried, held or dead-lettered)",
                              ["service", "subject"], registry=self.registry)
        self.latency = Histogram("bke_handler_seconds", "Handler time per message", ["service", "subject"],
                                 buckets=_BUCKETS, registry=self.registry)
        self.ready = Gauge("bke_service_ready", "1 while the service is ready (bus, store, streams)", ["service"],
                           registry=self.registry)
        self.refreshers: list[Callable[[], Awaitable[None]]] = []
        self.is_ready: Callable[[], bool] = lambda: False

    def gauge(self, name: str, doc: str, labels: list[str]) -> Gauge:
        """A domain gauge in this service's registry (set by one of its refreshers)."""
        return Gauge(name, doc, labels, registry=self.registry)

    def counter(self, name: str, doc: str, labels: list[str]) -> Counter:
        """A domain counter in this service's registry (exposed as `<name>_total`)."""
        return Counter(name, doc, labels, registry=self.registry)

    def observe(self, subject: str, work: Callable[[bytes], Awaitable[None]]) -> Callable[[bytes], Awaitable[None]]:
        """`work` counted and timed under `subject`."""
        handled = self.handled.labels(self.service, subject)
        failed = self.failed.labels(self.service, subject)
        latency = self.latency.labels(self.service, subject)

        async def measured(body: bytes) -> None:
            t0 = time.perf_counter()
            try:
                await work(body)
            except BaseException:
                failed.inc()
                raise
            else:
                handled.inc()
            finally:
                latency.observe(time.perf_counter() - t0)

        return measured

    async def exposition(self) -> bytes:
        """The text a scrape gets: every refresher run first, each bounded."""
        self.ready.labels(self.service).set(1 if self.is_ready() else 0)
        for refresh in self.refreshers:
            try:
                await asyncio.wait_for(refresh(), timeout=REFRESH_TIMEOUT_S)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - a figure that cannot be read stays as it was
                log.warning("metrics refresh failed: %s: %s", type(exc).__name__, exc,
                            extra={"rate_key": f"{self.service}:metrics"})
        return generate_latest(self.registry)

    def sample(self, name: str, labels: dict[str, Any] | None = None) -> float | None:
        """One sample's value (tests and dashboards)."""
        return self.registry.get_sample_value(name, labels or {})
