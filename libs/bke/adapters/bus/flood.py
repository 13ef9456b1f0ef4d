"""A consumer of agents' outputs that counts each node's stray ones and reports a flood once per
node and window (the counting and the bound: bke.core.flood).

    watch = FloodWatch(svc.metrics, svc.name, svc.publish, now)
    svc.fast_subscriber(..., watch.guard("result", typed(CommandResult, handler, ...)))

The dispatcher watches the results and refusals (the deprecated `upgrader-result` subject's
apart: `apart`), the certs service the registrations (every one counts: an agent registers once
per start).

`guard` wraps the bytes-in work of a subscriber. An output is stray when the work raises
MalformedMessage (bytes that are no message of the contract), when the handler called
`mark_stray()` while handling it (a result it drops: bke_dispatcher.results,
bke.adapters.bus.misaddressed), or always, for a kind that never settles a command
(`every=True`: an agent's refusal). The node is the one its subject names: NATS permissions bind
`bke.v1.agent.<cluster>.<node>.*` to that node's identity, whatever the payload says.

Past the bound (bke.core.flood.FLOOD_LIMIT), once per node and window:

* one summary in the dead-letter stream, `bke.v1.deadletter.<service>`: a `DeadLettered` whose
  reason starts with `flood:` and names the node, the counts and the bytes, with no payload;
* one `bke.v1.agents.flooding` event (`AgentFlooding`, counts only);
* and from then on, for that window and the next, a malformed output of that node is
  acknowledged and dropped instead of dead-lettered with its bytes.

Counted on /metrics, with no node label (bounded):

    bke_agent_outputs_stray_total{service, kind}
    bke_agent_floods_total{service}
"""
from __future__ import annotations

import copy
import logging
from contextvars import ContextVar
from datetime import datetime
from typing import Any, Awaitable, Callable

from bke.contracts.agent import subject_node
from bke.contracts.deadletter import AGENTS_FLOODING, AgentFlooding, DeadLettered
from bke.contracts.subjects import DEADLETTER
from bke.core.errors import MalformedMessage
from bke.core.flood import FLOOD_LIMIT, FloodCounter, FloodLimit, FloodReport, FloodVerdict
from bke.adapters.bus.handler import Publish
from .delivery import delivery_subject

__all__ = ["FloodWatch", "STRAY_METRIC", "FLOODS_METRIC", "flood_reason", "mark_stray"]

log = logging.getLogger("bke.adapters.bus.flood")
STRAY_METRIC = "bke_agent_outputs_stray"  # exposed as <name>_total
FLOODS_METRIC = "bke_agent_floods"
# Set by `guard` for the delivery being handled; `mark_stray` flips it.
_STRAY: ContextVar[list[bool] | None] = ContextVar("bke_stray_output", default=None)


def mark_stray() -> None:
    """The output being handled answers no command in flight (a no-op outside a guarded delivery)."""
    box = _STRAY.get()
    if box is not None:
        box[0] = True


def flood_reason(r: FloodReport, at: datetime) -> str:
    """The dead-letter summary's reason: counts and bytes, never the payloads."""
    took = max(0.0, (at - r.since).total_seconds())
    return (f"flood: node {r.node} of cluster {r.cluster} sent {r.outputs} outputs that answer no command in flight "
            f"({r.malformed} malformed, {r.bytes} bytes) within {took:.0f} s, more than {r.bound} in a window "
            f"of {r.window_s:.0f} s; payloads not kept")


class FloodWatch:
    """One per service; its counters are registered once in the service's registry."""

    def __init__(self, metrics: Any, service: str, publish: Publish, now: Callable[[], datetime],
                 limit: FloodLimit = FLOOD_LIMIT) -> None:
        self.service, self.publish, self.now, self.limit = service, publish, now, limit
        self.counter = FloodCounter(limit)
        self.stray = metrics.counter(STRAY_METRIC, "Agents' outputs that answer no command in flight or are no "
                                                   "message, per kind", ["service", "kind"])
        self.floods = metrics.counter(FLOODS_METRIC, "Floods of one node's outputs reported (one per node and "
                                                     "window)", ["service"])

    def apart(self) -> FloodWatch:
        """A watch of the same service (its counters, its reports) that counts each node's outputs
        apart from this one's: the dispatcher's over the deprecated `upgrader-result` subject,
        which counts a node's outputs there as the upgrader, their reader before, counted them."""
        other = copy.copy(self)
        other.counter = FloodCounter(self.limit)
        return other

    def guard(self, kind: str, work: Callable[[bytes], Awaitable[None]], *,
              every: bool = False) -> Callable[[bytes], Awaitable[None]]:
        """`work`, with its stray outputs counted per node (see the module docstring). With
        `every`, each output counts before `work`, and a flooding node's is dropped unhandled
        (its handler's writes stay bounded too)."""
        stray = self.stray.labels(self.service, kind)

        async def watched(body: bytes) -> None:
            verdict: FloodVerdict | None = None
            if every:
                stray.inc()
                verdict = await self._note(body, malformed=False)
                if verdict is not None and verdict.flooding:
                    return  # acknowledged and dropped: counted, reported once
            box = [False]
            token = _STRAY.set(box)
            try:
                await work(body)
            except MalformedMessage:
                if not every:
                    stray.inc()
                    verdict = await self._note(body, malformed=True)
                if verdict is None or verdict.keep_payload:
                    raise  # dead-lettered with its bytes, as any malformed message
                return  # a flooding node's: acknowledged and dropped (counted, reported)
            finally:
                _STRAY.reset(token)
            if box[0] and not every:
                stray.inc()
                await self._note(body, malformed=False)

        watched.__name__ = getattr(work, "__name__", "watched")
        return watched

    async def _note(self, body: bytes, malformed: bool) -> FloodVerdict | None:
        """Count one stray output; report a flood once per window. None outside a delivery (a
        unit test's direct call): nothing to count it by."""
        where = subject_node(delivery_subject())
        if where is None:
            return None
        now = self.now()
        verdict = self.counter.note(where[0], where[1], len(body), malformed, now)
        if verdict.report is not None:
            await self._report(verdict.report, now)
        return verdict

    async def _report(self, r: FloodReport, now: datetime) -> None:
        """The summary and the event; best effort (NATS away: the log line and the counter stay)."""
        self.floods.labels(self.service).inc()
        reason = flood_reason(r, now)
        log.error("%s", reason, extra={"cluster": r.cluster, "node": r.node, "outputs": r.outputs, "bytes": r.bytes,
                                       "rate_key": f"{self.service}:flood"})
        letter = DeadLettered(subject=delivery_subject(), service=self.service, deliveries=r.outputs, reason=reason,
                              payload_b64="")
        event = AgentFlooding(cluster=r.cluster, node=r.node, service=self.service, outputs=r.outputs,
                              malformed=r.malformed, bytes=r.bytes, window_s=r.window_s, since=r.since.isoformat(),
                              at=now.isoformat())
        try:
            await self.publish(letter.to_bytes(), f"{DEADLETTER}.{self.service}", {})
            await self.publish(event.to_bytes(), AGENTS_FLOODING, {})
        except Exception as exc:  # noqa: BLE001 - the flood is still counted and logged
            log.warning("flood report not published: %s: %s", type(exc).__name__, exc,
                        extra={"cluster": r.cluster, "node": r.node, "rate_key": f"{self.service}:flood-report"})
