"""Cluster health after the install: health commands through the agents, on a period.

One replica sends a cluster's round per period (a lease, `_my_round`). Each round sends one command per node (every kubelet; etcd and control-plane endpoints where they run) (id `<cluster>/health@<round>/<node>/0`)
and keeps the latest answer per node in `bke:<cluster>:health`. Kube-system pod status via
the kubernetes client is added where an apiserver is reachable (not in the lab).
"""
from __future__ import annotations

import json
import logging
from datetime import datetime
from typing import Awaitable, Callable

from bke.adapters.coalesce import Coalesced
from bke.adapters.periodic import Periodic
from bke.contracts.agent import AgentCommand, CommandResult, agent_subject
from bke.contracts.operation_ref import OperationKind, OperationRef
from bke.contracts.statuses import FinishedStatus, HealthStatus, InstallStatus, StepResultStatus
from bke.core.plan import Plan
from bke.adapters.state import PlanCache
from bke.adapters.state.keys.dispatcher import health_key, health_meta_key, health_pods_key, heartbeat_key
from bke.adapters.state.lease import claim_lease

from .phases import HEALTH, phase_by_slug
from bke.core.node_steps import health_steps
from bke.adapters.state.command_signing import Prefetch, SignBytes
from .state import DispatcherState

__all__ = ["HealthMonitor"]

log = logging.getLogger("bke.dispatcher.health")
HEALTH_COMPONENTS = HEALTH
ROUND_LEASE = "health-round"
PREFETCH_CHUNK = 500  # health commands whose bindings are read in one round trip


class HealthMonitor:
    def __init__(
        self,
        state: DispatcherState,
        plans: PlanCache,
        publish: Callable[[bytes, str, dict[str, str]], Awaitable[None]],
        now: Callable[[], datetime],
        interval_s: float,
        pods: Callable[[Plan], Awaitable[dict]] | None = None,
        *,
        sign: SignBytes,
        owner: str = "",
        prefetch: Prefetch | None = None,
    ):
        self.sign = sign  # health commands are signed like every other (signing.py)
        self.prefetch = prefetch  # the bindings of a chunk of the round, read in one round trip
        self.state, self.plans, self.publish, self.now, self.interval_s = state, plans, publish, now, interval_s
        self.pods = pods  # kube-system pod status via the kubernetes client (real clusters only)
        self._rounds = Periodic("health", interval_s, self.round, log)
        self.owner = owner
        self._recorded: Coalesced[str, tuple[str, str, str], None] = Coalesced(self._record_many)

    async def _my_round(self, cluster: str) -> bool:
        """Whether this replica runs this period's round of `cluster`: a lease held for most of a
        period and never released, so that of N replicas' timers one sends a round per period
        (the others find it held) and a dead replica's turn passes to another."""
        ttl_ms = max(1000, int(self.interval_s * 900))  # 90% of the period
        return await claim_lease(self.state.r, cluster, ROUND_LEASE, self.owner, ttl_ms)

    def start(self) -> None:
        self._rounds.start()

    async def stop(self) -> None:
        await self._rounds.stop()

    async def round(self) -> int:
        sent = 0
        for cluster in await self.state.installs():
            if (await self.state.install(cluster)).get("status") != InstallStatus.SUCCEEDED:
                continue
            if not await self._my_round(cluster):
                continue  # another replica's round for this period
            plan = await self.plans.load(cluster)
            if self.pods is not None:
                await self._record_pods(cluster, plan)
            rnd = int(await self.state.r.hincrby(health_meta_key(cluster), "round", 1))
            targets = phase_by_slug("health").targets(plan)
            for i, node in enumerate(targets):
                if self.prefetch is not None and i % PREFETCH_CHUNK == 0:
                    await self.prefetch(cluster, [n.hostname for n in targets[i:i + PREFETCH_CHUNK]])
                # short waits: a round reports what answers now, it does not wait for recovery
                steps = health_steps(plan, node, HEALTH_COMPONENTS, min(10.0, max(2.0, self.interval_s / 2)))
                cmd = AgentCommand(
                    command_id=f"{cluster}/health@{rnd}/{node.hostname}/0",
                    cluster=cluster,
                    node=node.hostname,
                    phase="health",
                    issued_at=self.now().isoformat(),
                    steps=steps,
                    operation=OperationRef(kind=OperationKind.HEALTH, id=str(rnd)),
                )
                await self.publish(await self.sign(cmd), agent_subject(cluster, node.hostname, "command"),
                                   {"Nats-Msg-Id": cmd.command_id})
                sent += 1
        return sent

    async def _record_pods(self, cluster: str, plan: Plan) -> None:
        try:
            doc = await self.pods(plan)  # type: ignore[misc]
        except Exception as exc:  # noqa: BLE001 - an unreachable apiserver is a health fact, not a crash
            doc = {"error": f"{type(exc).__name__}: {exc}"[:500]}
        doc["at"] = self.now().isoformat()
        await self.state.r.set(health_pods_key(cluster), json.dumps(doc))

    async def record(self, res: CommandResult) -> None:
        """Keep the node's latest answer; the answers of a cluster handled in the same turn are
        written together (one round trip, `_recorded`)."""
        failing = [s.id for s in res.steps if s.status == StepResultStatus.FAILED]
        healthy = res.status == FinishedStatus.SUCCEEDED
        doc = {"status": HealthStatus.HEALTHY if healthy else HealthStatus.UNHEALTHY, "failing": failing, "at": res.finished_at}
        await self._recorded(res.cluster, (res.node, json.dumps(doc), res.finished_at))

    async def _record_many(self, cluster: str, answers: list[tuple[str, str, str]]) -> list[None]:
        """(node, health doc, answered at) of several answers, in order: the last of a node wins."""
        async with self.state.r.pipeline(transaction=False) as pipe:
            pipe.hset(health_key(cluster), mapping={node: doc for node, doc, _ in answers})
            # an answer is a sign of life as good as a heartbeat: the install's own health phase
            # thereby leaves every node alive for the upgrader's checks, though an agent's first
            # beats, sent before the plan was stored, were dropped (beats come every 10 s)
            pipe.hset(heartbeat_key(cluster), mapping={node: at for node, _, at in answers})
            await pipe.execute()
        return [None] * len(answers)
