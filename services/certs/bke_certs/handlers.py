"""The certs service's handlers: typed messages in, messages to publish out (bke.adapters.bus.handler),
thin over `service_core` (bke.core.pki underneath).

    plan created        -> ensure the cluster PKI, seal the registered agents' bundles
                           (`certs sealed`), then `certs issued` (references only)
    issue certs         -> the same, for a retry after a failure
    provision agent     -> (operator request) record the key BKE made for a node's agent
    agent registered    -> only if its key is the provisioned one: seal that node's bundle to
                           the agent, store it for the dispatcher; an unusable agent key is
                           `certs failed` naming the node. Any other key (or none provisioned):
                           `agents refused`, nothing stored, nothing sealed
    renew certs         -> unless the cluster is busy: renew the named (or expiring) leaves,
                           re-seal the affected nodes' bundles, one `certs renewed` listing them
                           all (refused or failed: `certs failed` with the reason)
    install finished    -> remember the install's outcome (automatic renewal waits for it)
    rotation changed    -> remember the rotation's status; a finished one ends the operation
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Callable, Literal

from redis.asyncio import Redis

from bke.contracts import PlanCreated
from bke.contracts.agent import (
    AGENTS_ACCEPTED,
    AGENTS_REFUSED,
    AgentAccepted,
    AgentProvisioned,
    AgentRefused,
    AgentRegistered,
    ProvisionAgent,
)
from bke.contracts.certs import (
    CERTS_FAILED,
    CERTS_ISSUED,
    CERTS_RENEWED,
    CERTS_SEALED,
    CertsFailed,
    CertsIssued,
    CertsRenewed,
    CertsSealed,
    IssueCerts,
    RenewedCertificate,
    RenewCerts,
)
from bke.contracts.install import InstallFinished
from bke.contracts.rotation import RotationChanged
from bke.contracts.statuses import InstallStatus, OperationStatus
from bke.adapters.bus.handler import Out, Publish, first_of
from bke.core.errors import RejectedInput, TemporaryError
from bke.adapters.pki.api_credentials import write_api_credentials
from bke.core.pki.errors import PkiError, PkiNotReady
from bke.core.secrets import SecretBox
from bke.core.secrets.record_signing import RecordKeyError, RecordSignatureError
from bke.adapters.state import PlanCache
from bke.adapters.state.keys.certs import certs_agents_key, provisioned_agents_key
from bke.adapters.state.nodefiles import RedisNodeFiles
from bke.adapters.state.operation_slot import claim_operation, release_operation
from bke.adapters.state.plans import plan_exists

from .cache import CachedPkiStore
from .operations import OpsStore
from .renewal import renew_refusal
from .ca_guard import ca_conflict
from .sealing import provisioned_refusal, seal_bundle
from bke.core.pki.operations import node_bundles

from .service_core import ensure_cluster_certs, renew_requested
from bke.adapters.pki.store_redis import RedisPkiStore, pki_keys

__all__ = ["CertsHandlers"]

log = logging.getLogger("bke.certs")
RESEAL_CHUNK = 500
ROTATION = "rotation"  # a renewal's name in the cluster's operation slot: the rotation it starts
ANNOUNCE_CHUNK = 5000  # node names per `certs sealed` (10,000 hostnames stay far below 1 MiB)


@dataclass
class CertsHandlers:
    redis: Redis
    box_factory: Callable[[], SecretBox]  # the `pki` keys (bke.core.secrets.key_kinds), current at each call
    api_box_factory: Callable[[], SecretBox]  # the `api` keys: the kubeconfigs the dispatcher and upgrader read
    publish: Publish
    now: Callable[[], datetime]

    def __post_init__(self) -> None:
        self.plans = PlanCache(self.redis)
        self.store = RedisPkiStore(self.redis)
        self.bundles = CachedPkiStore(self.redis, self.store)
        self.files = RedisNodeFiles(self.redis)
        self.ops = OpsStore(self.redis)

    def _agents_key(self, cluster: str) -> str:
        return certs_agents_key(cluster)

    async def on_plan(self, ev: PlanCreated) -> list[Out]:
        return await self.ensure(ev.cluster, ev.request_id, ev.plan_digest)

    async def on_issue_certs(self, req: IssueCerts) -> list[Out]:
        """A retry after a certificates failure: the same work as for a new plan (idempotent:
        the PKI is reused, only nodes without a bundle are sealed)."""
        meta = await self.plans.store.meta(req.cluster)
        if meta is None:
            return [Out(CertsFailed(request_id=req.request_id, cluster=req.cluster, kind="invalid",
                                    reason=f"cluster {req.cluster!r} has no plan"), CERTS_FAILED)]
        return await self.ensure(req.cluster, req.request_id, meta.digest, install=req.purpose == "install")

    async def ensure(self, cluster: str, request_id: str, digest: str, install: bool = True) -> list[Out]:
        try:
            plan = await self.plans.load(cluster)
        except (RecordSignatureError, RecordKeyError) as exc:
            # a plan its writer did not sign decides no node's keys; the operation fails naming it
            log.warning("plan refused: %s", exc, extra={"cluster": cluster, "request_id": request_id})
            return [Out(CertsFailed(request_id=request_id, cluster=cluster, reason=str(exc), kind="invalid",
                                    plan_digest=digest), CERTS_FAILED)]
        try:
            report = await ensure_cluster_certs(plan, self.store, self.now(), self.box_factory())
        except TemporaryError:
            raise
        except PkiError as exc:
            log.warning("PKI not ensured: %s", exc, extra={"cluster": cluster, "request_id": request_id})
            kind = "invalid" if isinstance(exc, RejectedInput) else "operational"
            return [Out(CertsFailed(request_id=request_id, cluster=cluster, reason=str(exc), kind=kind,
                                    plan_digest=digest), CERTS_FAILED)]
        # the kubeconfigs the dispatcher and upgrader do their API work with (they never read the PKI)
        await write_api_credentials(self.redis, plan, self.store, self.box_factory(), self.api_box_factory())
        if install:  # a plan starts (or resumes) an install; workers joining do not (no install.finished follows)
            await self.ops.set_install(cluster, InstallStatus.RUNNING)
        issued = CertsIssued(
            request_id=request_id,
            cluster=cluster,
            issued=report.issued,
            reissued=[r.instance for r in report.reissued],
            reused=len(report.reused),
            changed_nodes=len(report.changed_nodes),
            warnings=report.warnings,
            plan_digest=digest,
        )
        # Agents that registered before the PKI existed, and nodes whose files changed, first; then
        # every plan node that has a bundle is announced (so a redelivery after a crash announces
        # what the first delivery sealed); then `certs issued`: every sealed bundle is of this PKI.
        # A node whose agent key is unusable has its own `certs failed`.
        failures = await self.reseal(cluster, report.changed_nodes, request_id=request_id)
        known = {n.hostname for n in plan.nodes}
        have = [n for n in await self.files.nodes(cluster, "certs") if n in known]
        ids = await self._agent_ids(cluster)
        sealed = [Out(CertsSealed(cluster=cluster, nodes=chunk, agents={n: ids[n] for n in chunk if n in ids}),
                      CERTS_SEALED)
                  for chunk in (have[i : i + ANNOUNCE_CHUNK] for i in range(0, len(have), ANNOUNCE_CHUNK))]
        return [*failures, *sealed, Out(issued, CERTS_ISSUED, f"certs:{request_id}:{digest}")]

    async def gave_up(self, body: bytes, reason: str) -> None:
        """Every delivery of a plan (or issue request) failed unexpectedly: say so for its cluster."""
        ev = first_of(body, PlanCreated, IssueCerts)
        assert isinstance(ev, (PlanCreated, IssueCerts))
        failed = CertsFailed(request_id=ev.request_id, cluster=ev.cluster, kind="operational",
                             plan_digest=getattr(ev, "plan_digest", ""), reason=f"the certs service gave up: {reason}")
        await self.publish(failed.to_bytes(), CERTS_FAILED, {})

    async def _agent_ids(self, cluster: str) -> dict[str, str]:
        """node -> id of the accepted agent key (from the registrations this service accepted)."""
        raw = await self.redis.hgetall(self._agents_key(cluster))
        return {(k.decode() if isinstance(k, bytes) else k): AgentRegistered.model_validate_json(v).agent_id
                for k, v in raw.items()}

    async def on_provision(self, req: ProvisionAgent) -> AgentProvisioned:
        """Record the agent key BKE made for a node (idempotent; a new key replaces the old one,
        and the old key's accepted registration is forgotten: that agent is trusted no more)."""
        why = provisioned_refusal(req, None)
        if why:
            return AgentProvisioned(cluster=req.cluster, node=req.node, ok=False, reason=why)
        await self.redis.hset(provisioned_agents_key(req.cluster), req.node, req.model_dump_json(by_alias=True))
        old = await self.redis.hget(self._agents_key(req.cluster), req.node)
        if old is not None and AgentRegistered.model_validate_json(old).agent_id != req.agent_id:
            await self.redis.hdel(self._agents_key(req.cluster), req.node)
        log.info("agent key provisioned", extra={"cluster": req.cluster, "node": req.node, "agent_id": req.agent_id})
        return AgentProvisioned(cluster=req.cluster, node=req.node, ok=True)

    async def on_registered(self, reg: AgentRegistered) -> list[Out]:
        """If the key is the one provisioned for the node: remember it; seal now if the
        cluster's PKI exists, else `ensure` will. Otherwise refuse: nothing stored or sealed.

        (Agents may start long before the cluster is requested: their registrations must not
        wait in redelivery for a plan that may never come. A registration for a node that
        was never provisioned, e.g. one not in any plan, is refused the same way and leaves no
        state, so it can never stand in the way of a plan.)"""
        raw = await self.redis.hget(provisioned_agents_key(reg.cluster), reg.node)
        why = provisioned_refusal(ProvisionAgent.model_validate_json(raw) if raw is not None else None, reg)
        if why:
            log.warning("registration refused: %s", why, extra={"cluster": reg.cluster, "node": reg.node,
                                                                "agent_id": reg.agent_id})
            ev = AgentRefused(cluster=reg.cluster, node=reg.node, agent_id=reg.agent_id, reason=why,
                              at=self.now().isoformat())
            # one event per (node, key) within the duplicate window: a flood does not become one
            return [Out(ev, AGENTS_REFUSED, f"refused:{reg.cluster}:{reg.node}:{reg.agent_id}")]
        await self.redis.hset(self._agents_key(reg.cluster), reg.node, reg.model_dump_json(by_alias=True))
        accepted = Out(AgentAccepted(cluster=reg.cluster, node=reg.node, agent_id=reg.agent_id, at=self.now().isoformat()),
                       AGENTS_ACCEPTED, f"accepted:{reg.cluster}:{reg.node}:{reg.agent_id}")
        if not (await self.redis.exists(pki_keys(reg.cluster)["manifest"]) and await plan_exists(self.redis, reg.cluster)):
            return [accepted]
        sealed, failures = await self._seal_nodes(reg.cluster, [reg], request_id=f"registered:{reg.agent_id}")
        out = [Out(CertsSealed(cluster=reg.cluster, nodes=sealed, agents={n: reg.agent_id for n in sealed}), CERTS_SEALED)]
        return [accepted, *failures, *(out if sealed else [])]

    async def _seal_nodes(self, cluster: str, regs: list[AgentRegistered], request_id: str,
                          operation: Literal["install", "renewal"] = "install") -> tuple[list[str], list[Out]]:
        """Seal and store these agents' bundles: the nodes sealed, and a `certs failed` naming
        each node whose agent key is unusable (it fails alone, never blocking the others)."""
        plan = await self.plans.load(cluster)
        known = {n.hostname for n in plan.nodes}
        unknown = sorted(r.node for r in regs if r.node not in known)
        if unknown:
            # not a reason to fail the cluster: a stray agent is no part of this plan
            log.warning("agents of nodes not in the plan ignored", extra={"cluster": cluster, "nodes": unknown[:20]})
        regs = [r for r in regs if r.node in known]
        if not regs:
            return [], []
        bundles = await node_bundles(plan, self.bundles, [r.node for r in regs], self.box_factory())
        sealed, refused, ca_refused = {}, {}, {}
        for r in regs:
            if conflict := ca_conflict(bundles[r.node], r):  # the node holds another CA
                ca_refused[r.node] = conflict
                continue
            try:
                sealed[r.node] = seal_bundle(bundles[r.node], r)
            except ValueError as exc:  # a malformed key, or an id that is not the key's
                refused[r.node] = str(exc)
        if sealed:
            await self.files.put_many(cluster, "certs", sealed)
        failures = []
        for node, why in sorted(refused.items()):
            log.warning("bundle not sealed", extra={"cluster": cluster, "node": node, "reason": why})
            failures.append(Out(CertsFailed(request_id=request_id, cluster=cluster, node=node, kind="operational",
                                            operation=operation,
                                            reason=f"node {node}: its agent's sealing key is unusable: {why}"),
                                CERTS_FAILED))
        for node, why in sorted(ca_refused.items()):
            log.error("bundle not sealed: %s", why, extra={"cluster": cluster, "node": node})
            failures.append(Out(CertsFailed(request_id=request_id, cluster=cluster, node=node, kind="operational",
                                            operation=operation, reason=why), CERTS_FAILED))
        log.debug("bundles sealed", extra={"cluster": cluster, "nodes": len(sealed)})
        return sorted(sealed), failures

    async def reseal(self, cluster: str, changed: list[str] | None, request_id: str = "",
                     operation: Literal["install", "renewal"] = "install") -> list[Out]:
        """Seal for every registered agent whose node changed (None: all) or has no bundle yet,
        in chunks (one pass over the plan per chunk, one Redis write per chunk); the failures."""
        raw = await self.redis.hgetall(self._agents_key(cluster))
        agents = {(k.decode() if isinstance(k, bytes) else k): v for k, v in raw.items()}
        have = set(await self.files.nodes(cluster, "certs"))
        todo = [
            AgentRegistered.model_validate_json(doc)
            for node, doc in agents.items()
            if changed is None or node in changed or node not in have
        ]
        failures: list[Out] = []
        for i in range(0, len(todo), RESEAL_CHUNK):
            _, failed = await self._seal_nodes(cluster, todo[i : i + RESEAL_CHUNK], request_id, operation)
            failures += failed
        return failures

    async def on_renew(self, req: RenewCerts) -> list[Out]:
        c, rid = req.cluster, req.request_id
        ids = {"cluster": c, "request_id": rid, "origin": req.origin}
        done = await self.ops.renewal(c, rid)
        if done is not None:  # a redelivery: answer what this request already did
            return [Out(CertsRenewed.model_validate_json(done), CERTS_RENEWED, f"renewed:{c}:{rid}")]
        # One operation per cluster: a renewal starts a certificate rotation, which holds the
        # cluster's operation slot from here until the dispatcher ends it (bke.adapters.state.operation_slot).
        # An upgrade's own renewal is part of the upgrade, which holds the slot already.
        claims = req.origin != "upgrade"
        if claims:
            claim = await claim_operation(self.redis, c, ROTATION, rid, self.now().isoformat())
            if not claim.won:
                return [self._renew_failed(req, claim.refusal(c))]
        why = renew_refusal(c, req, await self.ops.view(c))
        if why:
            return [await self._released(req, claims, why)]
        threshold = timedelta(days=req.within_days) if req.within_days is not None else None
        try:
            renewed = await renew_requested(c, self.store, self.now(), self.box_factory(), names=req.names,
                                            threshold=threshold, request_id=rid, kubernetes=req.kubernetes_version)
        except (PkiError, PkiNotReady) as exc:  # an unknown name, a CA, no PKI for this cluster
            return [await self._released(req, claims, str(exc))]
        if claims and not renewed:  # nothing to rotate: no rotation follows to release the slot
            await release_operation(self.redis, c, ROTATION, rid)
        # (a crash from here to the saved answer renews again on redelivery: new serials, same
        # names; the store stays consistent and only the last renewal is delivered)
        if renewed:  # admin.conf or super-admin.conf may be among them
            await self._refresh_api_credentials(c, rid)
        nodes = sorted({n for r in renewed for n in r.nodes})
        failures = await self.reseal(c, nodes, request_id=rid, operation="renewal") if nodes else []
        ev = CertsRenewed(
            request_id=rid, cluster=c, origin=req.origin, at=self.now().isoformat(),
            certificates=[RenewedCertificate(name=r.name, instance=r.instance, nodes=r.nodes, serial=r.serial,
                                             not_after=r.not_after.isoformat()) for r in renewed],
        )
        if renewed and req.origin != "upgrade":
            # the cluster is busy until its rotation finishes; an upgrade's renewal has no
            # rotation (the upgrader delivers the files) and the upgrade holds the cluster
            await self.ops.set_pending(c, rid)
        await self.ops.save_renewal(c, rid, ev.to_bytes())
        log.info("renewed %d certificate(s) on %d node(s); handed to the dispatcher", len(renewed), len(nodes), extra=ids)
        return [*failures, Out(ev, CERTS_RENEWED, f"renewed:{c}:{rid}")]

    async def _refresh_api_credentials(self, cluster: str, request_id: str) -> None:
        """The API credentials again after a renewal. A PKI without a stored plan (issued by
        `bke certs issue` and renewed on the bus) has none to refresh: the renewal stands."""
        try:
            plan = await self.plans.load(cluster)
        except TemporaryError:
            log.warning("no plan stored: the API credentials are not rewritten",
                        extra={"cluster": cluster, "request_id": request_id})
            return
        await write_api_credentials(self.redis, plan, self.store, self.box_factory(), self.api_box_factory())

    async def _released(self, req: RenewCerts, claimed: bool, why: str) -> Out:
        """A renewal that claimed the slot and will not run: the slot goes, the refusal is said."""
        if claimed:
            await release_operation(self.redis, req.cluster, ROTATION, req.request_id)
        return self._renew_failed(req, why)

    def _renew_failed(self, req: RenewCerts, why: str) -> Out:
        log.warning("renewal refused: %s", why, extra={"cluster": req.cluster, "request_id": req.request_id})
        ev = CertsFailed(request_id=req.request_id, cluster=req.cluster, reason=why, operation="renewal")
        return Out(ev, CERTS_FAILED, f"renew-failed:{req.cluster}:{req.request_id}")

    async def on_install_finished(self, ev: InstallFinished) -> None:
        await self.ops.set_install(ev.cluster, ev.status)

    async def on_rotation_changed(self, ev: RotationChanged) -> None:
        await self.ops.set_rotation(ev.cluster, ev.rotation.request_id, ev.rotation.status)
        if ev.rotation.status != OperationStatus.RUNNING:
            # the dispatcher released the slot it ended with; this again is idempotent (only
            # the rotation's own claim goes), for a dispatcher that died in between
            await release_operation(self.redis, ev.cluster, ROTATION, ev.rotation.request_id)
            log.info("rotation %s: %s", ev.rotation.status, ev.rotation.message or "every node done",
                     extra={"cluster": ev.cluster, "request_id": ev.rotation.request_id})
