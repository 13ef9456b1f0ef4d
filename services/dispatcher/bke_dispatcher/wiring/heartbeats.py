"""The agents' heartbeats (core NATS, `bke.v1.heartbeat.>`): advisory and kept in no stream.
Each known node's last beat is written (an answer to a health command counts as one,
bke_dispatcher.health), and its cgroup version and runtime when they change
(the upgrader's checks read them). A malformed beat, one of a node of no stored plan, one on
another node's subject, one of a deleted cluster, or one while the state is lost writes nothing;
a Redis outage loses the beat (the next says the same)."""
from __future__ import annotations

import json
import logging
from typing import Any

from bke.adapters.state.epoch import EpochWatch
from bke.adapters.state.keys.dispatcher import heartbeat_cgroup_key, heartbeat_key, heartbeat_runtime_key
from bke.contracts.agent import AgentRuntime, agent_subject

from ..known import KnownTargets
from .basics import Basics
from .forgotten import Forgotten

__all__ = ["HEARTBEATS", "Heartbeats", "runtime_json", "serve_heartbeats"]

log = logging.getLogger("bke.dispatcher")
HEARTBEATS = "bke.v1.heartbeat.>"


def runtime_json(raw: object) -> str | None:
    """A heartbeat's `runtime` as the canonical JSON stored for it; None when absent or not an
    AgentRuntime (never written: the upgrader reads only what parses)."""
    if not isinstance(raw, dict):
        return None
    try:
        return AgentRuntime.model_validate(raw).model_dump_json(by_alias=True)
    except ValueError:
        return None


class Heartbeats:
    def __init__(self, redis: Any, known: KnownTargets, forgotten: Forgotten, epoch: EpochWatch):
        self.redis, self.known, self.forgotten, self.epoch = redis, known, forgotten, epoch
        self.cgroups: dict[tuple[str, str], int] = {}  # (cluster, node) -> the cgroup version last written
        self.runtimes: dict[tuple[str, str], str] = {}  # (cluster, node) -> the runtime JSON last written

    async def on_message(self, msg: Any) -> None:
        if self.epoch.lost:  # nothing is written into a store that lost its state
            return
        try:
            hb = json.loads(msg.data)
            cluster, node, at = str(hb["cluster"]), str(hb["node"]), str(hb["at"])
            if await self.forgotten(cluster):
                return
            if msg.subject != agent_subject(cluster, node, "heartbeat") or not await self.known.has_node(cluster, node):
                log.warning("heartbeat dropped: unknown node", extra={"cluster": cluster, "node": node,
                                                                     "rate_key": "heartbeat-unknown"})
                return
            await self.redis.hset(heartbeat_key(cluster), node, at)
            await self._record_changes(cluster, node, hb)
        except (ValueError, KeyError, TypeError):
            return
        except Exception as exc:  # noqa: BLE001 - a Redis outage: the next heartbeat says the same
            log.warning("heartbeat not recorded: %s: %s", type(exc).__name__, exc, extra={"rate_key": "heartbeat-store"})

    async def _record_changes(self, cluster: str, node: str, hb: dict[str, Any]) -> None:
        # the cgroup version the agent reports (the upgrader's CgroupV2 check), written only
        # when it changes: it does not change between two heartbeats of a running host
        cgroup = hb.get("cgroupVersion")
        if cgroup in (1, 2) and self.cgroups.get((cluster, node)) != cgroup:
            await self.redis.hset(heartbeat_cgroup_key(cluster), node, str(cgroup))
            self.cgroups[(cluster, node)] = cgroup
        # the agent's version, Python and platform (the upgrade's agents step picks each
        # node's wheels from it), likewise written when it changes: after an update; one
        # that does not parse is not written (the rest of the heartbeat still counts)
        runtime = runtime_json(hb.get("runtime"))
        if runtime is not None and self.runtimes.get((cluster, node)) != runtime:
            await self.redis.hset(heartbeat_runtime_key(cluster), node, runtime)
            self.runtimes[(cluster, node)] = runtime


def serve_heartbeats(b: Basics, known: KnownTargets, forgotten: Forgotten, epoch: EpochWatch) -> Heartbeats:
    beats = Heartbeats(b.redis, known, forgotten, epoch)

    async def subscribe() -> None:
        await b.svc.nc.subscribe(HEARTBEATS, cb=beats.on_message)

    b.svc.after_start.append(subscribe)
    return beats
