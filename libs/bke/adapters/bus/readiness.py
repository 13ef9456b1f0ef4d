"""Is this service ready? A few named conditions (NATS connected, Redis reachable, streams
declared), each set by whoever observes it: nats-py's disconnected/reconnected callbacks, the
consumer that finds the store away while handling a message, a probe.

Each change is logged once ("not ready: redis unreachable: ..."), not once per failed attempt,
and the whole is answered on `bke.v1.health.<service>` (see `Service`); an HTTP /readyz can
serve the same object later. No HTTP, no clients here: the object only records.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Iterable

from bke.contracts.health import ServiceHealth

__all__ = ["CONDITIONS", "Readiness"]

log = logging.getLogger("bke.readiness")
CONDITIONS = ("nats", "redis", "streams")


class Readiness:
    def __init__(self, service: str, conditions: Iterable[str] = CONDITIONS):
        self.service = service
        self._ok: dict[str, bool] = {c: False for c in conditions}
        self._why: dict[str, str] = {c: "not checked yet" for c in conditions}
        self._changed: asyncio.Event | None = None  # made on first wait, on the running loop

    @property
    def ready(self) -> bool:
        return all(self._ok.values())

    def ok(self, condition: str) -> bool:
        return self._ok.get(condition, True)

    def set(self, condition: str, ok: bool, why: str = "") -> None:
        """Record a condition; log only a change (an outage is one line, not one per attempt)."""
        was_ready, before = self.ready, self._ok.get(condition)
        self._ok[condition] = ok
        self._why[condition] = "" if ok else (why or f"{condition} unavailable")
        if before == ok:
            return
        if ok:
            log.info("%s ok", condition, extra={"service": self.service, "condition": condition})
        else:
            log.warning("not ready: %s", self._why[condition], extra={"service": self.service, "condition": condition})
        if self.ready != was_ready:
            log.info("ready" if self.ready else "not ready", extra={"service": self.service})
        if self._changed is not None:
            self._changed.set()

    def reasons(self) -> list[str]:
        return [self._why[c] for c, ok in self._ok.items() if not ok]

    def snapshot(self) -> ServiceHealth:
        return ServiceHealth(service=self.service, ready=self.ready, conditions=dict(self._ok), reasons=self.reasons())

    async def wait_for(self, condition: str, timeout: float) -> bool:
        """Wait until `condition` holds, at most `timeout` seconds; whether it holds."""
        if self.ok(condition):
            return True
        if self._changed is None:
            self._changed = asyncio.Event()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not self.ok(condition):
            left = deadline - loop.time()
            if left <= 0:
                return False
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), timeout=left)
            except TimeoutError:
                return self.ok(condition)
        return True
