"""The certs service's handlers: thin, over `service_core` (bke.pki underneath).

    plan created        -> ensure the cluster PKI, publish `certs issued` (references only),
                           seal the registered agents' bundles (`certs sealed`)
    issue requested     -> the same, for a retry after a failure
    agent registered    -> seal that node's bundle to the agent, store it for the dispatcher;
                           an unusable agent key is `certs failed` naming the node
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
from bke.contracts.certs import (
    CERTS_FAILED,
    CERTS_ISSUED,
    CERTS_RENEWED,
    CERTS_SEALED,
    CertRenewed,
    CertsFailed,
    CertsIssued,
    CertsSealed,
    IssueRequested,
    RenewRequested,
)
from bke.errors import MalformedMessage, PermanentError, RejectedInput, TemporaryError
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
        await self.ensure(ev.cluster, ev.request_id, ev.plan_digest)

    async def on_issue_requested(self, body: bytes) -> None:
        """A retry after a certificates failure: the same work as for a new plan (idempotent:
        the PKI is reused, only nodes without a bundle are sealed)."""
        try:
            req = IssueRequested.model_validate_json(body)
        except ValidationError as exc:
            raise MalformedMessage(f"malformed issue request: {exc}") from exc
        meta = await self.plans.store.meta(req.cluster)
        if meta is None:
            raise PermanentError(f"issue requested for cluster {req.cluster!r}, which has no plan")
        await self.ensure(req.cluster, req.request_id, meta.digest)

    async def ensure(self, cluster: str, request_id: str, digest: str) -> None:
        plan = await self.plans.load(cluster)
        try:
            report = await ensure_cluster_certs(plan, self.store, self.now(), self.box_factory())
        except TemporaryError:
            raise
        except PkiError as exc:
            kind = "invalid" if isinstance(exc, RejectedInput) else "operational"
            failed = CertsFailed(request_id=request_id, cluster=cluster, reason=str(exc), kind=kind, plan_digest=digest)
            await self.publish(failed.to_bytes(), CERTS_FAILED, {})
            raise PermanentError(str(exc)) from exc
        out = CertsIssued(
            request_id=request_id,
            cluster=cluster,
            issued=report.issued,
            reissued=[r.instance for r in report.reissued],
            reused=len(report.reused),
            changed_nodes=len(report.changed_nodes),
            warnings=report.warnings,
            plan_digest=digest,
        )
        # agents that registered before the PKI existed, and nodes whose files changed, first: once
        # `certs issued` is out, every sealed bundle is of this PKI (a node whose agent key is
        # unusable has its own `certs failed`)
        await self.reseal(cluster, report.changed_nodes, request_id=request_id)
        await self.publish(out.to_bytes(), CERTS_ISSUED, {"Nats-Msg-Id": f"certs:{request_id}:{digest}"})

    async def gave_up(self, body: bytes, reason: str) -> None:
        """Every delivery of a plan (or issue request) failed unexpectedly: say so for its cluster."""
        try:
            ev: PlanCreated | IssueRequested = PlanCreated.model_validate_json(body)
            digest = ev.plan_digest
        except ValidationError:
            ev = IssueRequested.model_validate_json(body)
            digest = ""
        failed = CertsFailed(request_id=ev.request_id, cluster=ev.cluster, kind="operational", plan_digest=digest,
                             reason=f"the certs service gave up: {reason}")
        await self.publish(failed.to_bytes(), CERTS_FAILED, {})

    async def on_registered(self, body: bytes) -> None:
        """Remember the agent's key; seal now if the cluster's PKI exists, else `ensure` will.

        (Agents may start long before the cluster is requested: their registrations must not
        wait in redelivery for a plan that may never come.)"""
        try:
            reg = AgentRegistered.model_validate_json(body)
        except ValidationError as exc:
            raise MalformedMessage(f"malformed registration: {exc}") from exc
        await self.redis.hset(self._agents_key(reg.cluster), reg.node, reg.model_dump_json(by_alias=True))
        if await self.redis.exists(pki_keys(reg.cluster)["manifest"]) and await self.redis.exists(plan_key(reg.cluster)):
            await self._seal_nodes(reg.cluster, [reg], request_id=f"registered:{reg.agent_id}")

    async def _seal_nodes(self, cluster: str, regs: list[AgentRegistered], request_id: str) -> None:
        """Seal and store these agents' bundles, then say so; a node whose agent key is unusable
        fails alone, with a `certs.failed` naming it, and never blocks the others."""
        plan = await self.plans.load(cluster)
        known = {n.hostname for n in plan.nodes}
        unknown = sorted(r.node for r in regs if r.node not in known)
        if unknown:
            # not a reason to fail the cluster: a stray agent is no part of this plan
            log.warning("agents of nodes not in the plan ignored", extra={"cluster": cluster, "nodes": unknown[:20]})
        regs = [r for r in regs if r.node in known]
        if not regs:
            return
        bundles = await node_bundles(plan, self.bundles, [r.node for r in regs], self.box_factory())
        sealed, refused = {}, {}
        for r in regs:
            try:
                sealed[r.node] = seal_bundle(bundles[r.node], r)
            except ValueError as exc:  # a malformed key, or an id that is not the key's
                refused[r.node] = str(exc)
        if sealed:
            await self.files.put_many(cluster, "certs", sealed)
            done = CertsSealed(cluster=cluster, nodes=sorted(sealed))
            await self.publish(done.to_bytes(), CERTS_SEALED, {})
        for node, why in sorted(refused.items()):
            log.warning("bundle not sealed", extra={"cluster": cluster, "node": node, "reason": why})
            failed = CertsFailed(request_id=request_id, cluster=cluster, node=node, kind="operational",
                                 reason=f"node {node}: its agent's sealing key is unusable: {why}")
            await self.publish(failed.to_bytes(), CERTS_FAILED, {})
        log.debug("bundles sealed", extra={"cluster": cluster, "nodes": len(sealed)})

    async def reseal(self, cluster: str, changed: list[str] | None, request_id: str = "") -> int:
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
            await self._seal_nodes(cluster, todo[i : i + RESEAL_CHUNK], request_id=request_id)
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


