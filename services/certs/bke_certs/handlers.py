"""The certs service's handlers: thin, over `service_core` (bke.pki underneath).

    plan created        -> ensure the cluster PKI, publish `certs issued` (references only)
    agent registered    -> seal that node's bundle to the agent, store it for the dispatcher
    renew requested     -> unless the cluster is busy: renew the named (or expiring) leaves,
                           re-seal the affected nodes' bundles, one `certs renewed` listing them
                           all (refused or failed: `certs failed` with the reason)
    install finished    -> remember the install's outcome (automatic renewal waits for it)
    rotation changed    -> remember the rotation's status; a finished one ends the operation
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
    CERTS_FAILED, CERTS_ISSUED, CERTS_RENEWED, CertsFailed, CertsIssued, CertsRenewed, RenewedCertificate, RenewRequested,
)
from bke.contracts.install import InstallFinished
from bke.contracts.rotation import RotationChanged
from bke.errors import MalformedMessage, PermanentError, TemporaryError
from bke.pki.errors import PkiError, PkiNotReady
from bke.secrets import SecretBox
from bke.state import PlanCache
from bke.state.keys import cluster_key, plan_key
from bke.state.nodefiles import RedisNodeFiles

from .cache import CachedPkiStore
from .operations import OpsStore
from .renewal import renew_refusal
from .sealing import seal_bundle
from bke.pki.operations import node_bundles

from .service_core import ensure_cluster_certs, renew_requested
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
        self.ops = OpsStore(self.redis)

    def _agents_key(self, cluster: str) -> str:
        return cluster_key(cluster, "certs", "agents")

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
        await self.ops.set_install(ev.cluster, "Running")  # a plan starts (or resumes) an install
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
        c, rid = req.cluster, req.request_id
        ids = {"cluster": c, "request_id": rid, "origin": req.origin}
        done = await self.ops.renewal(c, rid)
        if done is not None:  # a redelivery: answer what this request already did
            await self.publish(done, CERTS_RENEWED, {"Nats-Msg-Id": f"renewed:{c}:{rid}"})
            return
        why = renew_refusal(c, req, await self.ops.view(c))
        if why:
            await self._renew_failed(req, why)
            return
        threshold = timedelta(days=req.within_days) if req.within_days is not None else None
        try:
            renewed = await renew_requested(c, self.store, self.now(), self.box_factory(), names=req.names,
                                            threshold=threshold, request_id=rid)
        except (PkiError, PkiNotReady) as exc:  # an unknown name, a CA, no PKI for this cluster
            await self._renew_failed(req, str(exc))
            return
        # (a crash from here to the saved answer renews again on redelivery: new serials, same
        # names; the store stays consistent and only the last renewal is delivered)
        nodes = sorted({n for r in renewed for n in r.nodes})
        if nodes:
            await self.reseal(c, nodes)
        ev = CertsRenewed(
            request_id=rid, cluster=c, origin=req.origin, at=self.now().isoformat(),
            certificates=[RenewedCertificate(name=r.name, instance=r.instance, nodes=r.nodes, serial=r.serial,
                                             not_after=r.not_after.isoformat()) for r in renewed],
        )
        if renewed:
            await self.ops.set_pending(c, rid)  # the cluster is busy until its rotation finishes
        await self.ops.save_renewal(c, rid, ev.to_bytes())
        await self.publish(ev.to_bytes(), CERTS_RENEWED, {"Nats-Msg-Id": f"renewed:{c}:{rid}"})
        log.info("renewed %d certificate(s) on %d node(s); handed to the dispatcher", len(renewed), len(nodes), extra=ids)

    async def _renew_failed(self, req: RenewRequested, why: str) -> None:
        log.warning("renewal refused: %s", why, extra={"cluster": req.cluster, "request_id": req.request_id})
        ev = CertsFailed(request_id=req.request_id, cluster=req.cluster, reason=why)
        await self.publish(ev.to_bytes(), CERTS_FAILED, {"Nats-Msg-Id": f"renew-failed:{req.cluster}:{req.request_id}"})

    async def on_install_finished(self, body: bytes) -> None:
        try:
            ev = InstallFinished.model_validate_json(body)
        except ValidationError as exc:
            raise MalformedMessage(f"malformed install finished event: {exc}") from exc
        await self.ops.set_install(ev.cluster, ev.status)

    async def on_rotation_changed(self, body: bytes) -> None:
        try:
            ev = RotationChanged.model_validate_json(body)
        except ValidationError as exc:
            raise MalformedMessage(f"malformed rotation changed event: {exc}") from exc
        await self.ops.set_rotation(ev.cluster, ev.rotation.request_id, ev.rotation.status)
        if ev.rotation.status != "Running":
            log.info("rotation %s: %s", ev.rotation.status, ev.rotation.message or "every node done",
                     extra={"cluster": ev.cluster, "request_id": ev.rotation.request_id})
