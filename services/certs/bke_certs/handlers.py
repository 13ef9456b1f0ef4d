"""The certs service's handlers: thin, over `service_core` (bke.pki underneath).

    plan created        -> ensure the cluster PKI, publish `certs issued` (references only)
    agent registered    -> seal that node's bundle to the agent, store it for the dispatcher
    renew requested     -> renew what expires within the threshold, one `cert renewed` each,
                           and re-seal the affected nodes' bundles
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Awaitable, Callable

from pydantic import ValidationError
from redis.asyncio import Redis

from bke.contracts import PlanCreated
from bke.contracts.agent import AgentRegistered
from bke.contracts.certs import CERTS_FAILED, CERTS_ISSUED, CERTS_RENEWED, CertRenewed, CertsFailed, CertsIssued, RenewRequested
from bke.errors import MalformedMessage, PermanentError, TemporaryError
from bke.pki.errors import PkiError
from bke.secrets import SecretBox
from bke.state import PlanCache
from bke.state.keys import certs_agents_key, plan_key
from bke.state.nodefiles import RedisNodeFiles

from .cache import CachedPkiStore
from .sealing import seal_bundle
from bke.pki.operations import node_bundles

from .service_core import ensure_cluster_certs, renew_expiring
from bke.pki.store_redis import RedisPkiStore, pki_keys

__all__ = ["CertsHandlers"]

log = logging.getLogger("bke.certs")
RESEAL_CHUNK = 500
Publish = Callable[[bytes, str, dict[str, str]], Awaitable[None]]


@dataclass
class CertsHandlers:
    redis: Redis
    box_factory: Callable[[], SecretBox]
    publish: Publish
    now: Callable[[], datetime]

    def __post_init__(self) -> None:
        self.plans = PlanCache(self.redis)
        self.store = RedisPkiStore(self.redis)
        self.bundles = CachedPkiStore(self.redis, self.store)
        self.files = RedisNodeFiles(self.redis)

    def _agents_key(self, cluster: str) -> str:
        return certs_agents_key(cluster)

    async def on_plan(self, body: bytes) -> None:
        try:
            ev = PlanCreated.model_validate_json(body)
        except ValidationError as exc:
            raise MalformedMessage(f"malformed plan event: {exc}") from exc
        plan = await self.plans.load(ev.cluster)
        try:
            report = await ensure_cluster_certs(plan, self.store, self.now(), self.box_factory())
        except TemporaryError:
            raise
        except PkiError as exc:
            failed = CertsFailed(request_id=ev.request_id, cluster=ev.cluster, reason=str(exc))
            await self.publish(failed.to_bytes(), CERTS_FAILED, {})
            raise PermanentError(str(exc)) from exc
        # agents that registered before the PKI existed, and nodes whose files changed
        await self.reseal(ev.cluster, report.changed_nodes)
        out = CertsIssued(
            request_id=ev.request_id,
            cluster=ev.cluster,
            issued=report.issued,
            reissued=[r.instance for r in report.reissued],
            reused=len(report.reused),
            changed_nodes=len(report.changed_nodes),
            warnings=report.warnings,
        )
        await self.publish(out.to_bytes(), CERTS_ISSUED, {"Nats-Msg-Id": f"certs:{ev.request_id}"})

    async def on_registered(self, body: bytes) -> None:
        """Remember the agent's key; seal now if the cluster's PKI exists, else `on_plan` will.

        (Agents may start long before the cluster is requested: their registrations must not
        wait in redelivery for a plan that may never come.)"""
        try:
            reg = AgentRegistered.model_validate_json(body)
        except ValidationError as exc:
            raise MalformedMessage(f"malformed registration: {exc}") from exc
        await self.redis.hset(self._agents_key(reg.cluster), reg.node, reg.model_dump_json(by_alias=True))
        if await self.redis.exists(pki_keys(reg.cluster)["manifest"]) and await self.redis.exists(plan_key(reg.cluster)):
            await self._seal_node(reg)

    async def _seal_node(self, reg: AgentRegistered) -> None:
        await self._seal_nodes(reg.cluster, [reg])

    async def _seal_nodes(self, cluster: str, regs: list[AgentRegistered]) -> None:
        plan = await self.plans.load(cluster)
        known = {n.hostname for n in plan.nodes}
        unknown = [r.node for r in regs if r.node not in known]
        if unknown:
            raise PermanentError(f"agent for unknown node {unknown[0]!r} of cluster {cluster!r}")
        bundles = await node_bundles(plan, self.bundles, [r.node for r in regs], self.box_factory())
        try:
            sealed = {r.node: seal_bundle(bundles[r.node], r) for r in regs}
        except ValueError as exc:
            raise PermanentError(str(exc)) from exc
        await self.files.put_many(cluster, "certs", sealed)
        log.debug("bundles sealed", extra={"cluster": cluster, "nodes": len(sealed)})

    async def reseal(self, cluster: str, changed: list[str] | None) -> int:
        """Seal for every registered agent whose node changed (None: all) or has no bundle yet,
        in chunks (one pass over the plan per chunk, one Redis write per chunk)."""
        raw = await self.redis.hgetall(self._agents_key(cluster))
        agents = {(k.decode() if isinstance(k, bytes) else k): v for k, v in raw.items()}
        have = await self.files.get_many(cluster, "certs", list(agents))
        todo = [
            AgentRegistered.model_validate_json(doc)
            for node, doc in agents.items()
            if changed is None or node in changed or have.get(node) is None
        ]
        for i in range(0, len(todo), RESEAL_CHUNK):
            await self._seal_nodes(cluster, todo[i : i + RESEAL_CHUNK])
        return len(todo)

    async def on_renew(self, body: bytes) -> None:
        try:
            req = RenewRequested.model_validate_json(body)
        except ValidationError as exc:
            raise MalformedMessage(f"malformed renew request: {exc}") from exc
        renewed = await renew_expiring(req.cluster, self.store, self.now(), timedelta(days=req.within_days), self.box_factory())
        nodes = sorted({n for r in renewed for n in r.nodes})
        if nodes:
            await self.reseal(req.cluster, nodes)
        for r in renewed:
            ev = CertRenewed(
                request_id=req.request_id, cluster=req.cluster, name=r.name, instance=r.instance,
                nodes=r.nodes, serial=r.serial, not_after=r.not_after.isoformat(),
            )
            await self.publish(ev.to_bytes(), CERTS_RENEWED, {"Nats-Msg-Id": f"renewed:{req.request_id}:{r.instance}"})
        log.info("renewed %d", len(renewed), extra={"cluster": req.cluster, "request_id": req.request_id})


