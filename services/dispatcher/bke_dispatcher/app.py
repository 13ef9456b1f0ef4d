"""Dispatcher wiring: subscribers, the reconcile runner, the health monitor. No logic here."""
from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone
from typing import TypeVar

from bke.adapters.state.client import redis_client

from bke.adapters.bus.replies import answerable
from bke.adapters.bus.service import REDIS_PROBE_S, Service, make_service
from bke.adapters.bus.flood import FloodWatch
from bke.adapters.bus.handler import deprecated, typed
from bke.adapters.bus.misaddressed import Misaddressed
from bke.adapters.bus.other_incarnation import OtherIncarnation
from bke.contracts import PLAN_CREATED, PlanCreated
from bke.contracts.certs import CERTS_FAILED, CERTS_ISSUED, CERTS_SEALED, CertsFailed, CertsIssued, CertsSealed
from bke.contracts.render import MANIFESTS_RENDERED, RENDER_FAILED, ManifestsRendered, RenderFailed
from bke.contracts.agent import (
    AGENTS_ACCEPTED,
    AGENTS_COMMAND_KEY,
    AGENTS_REFUSED,
    AgentAccepted,
    AgentRefused,
    AgentRuntime,
    CommandKey,
    CommandRefused,
    CommandResult,
    agent_subject,
)
from bke.contracts.install import RETRY_INSTALL, RetryInstall
from bke.contracts.status import STATUS_GET, STATUS_QUEUE
from bke.adapters.pausing import serve_pause
from bke.adapters.forgetting import serve_deleted
from bke.adapters.state.pause import PauseFlags
from bke.contracts.subjects import LEGACY_RETRY_REQUESTED
from bke.core.secrets import box_for
from bke.adapters.state import PlanCache
from bke.adapters.state.epoch import watch_epoch
from bke.adapters.state.keys import heartbeat_cgroup_key, heartbeat_key, heartbeat_runtime_key, plan_key
from bke.adapters.state.nodefiles import RedisNodeFiles

from bke.adapters.cluster_api.addons import AddonsWork
from bke.lab.standins.addons import LabApplier
from .api_health import ApiHealthWork, periodic_doc
from .command_key import CommandKeyCarrier
from bke.adapters.checksums import HttpRepoChecksums
from bke.lab.standins.checksums import LabChecksums
from .dashboard import DashboardReader, RecentEvents, dashboard_routes
from bke.adapters.cluster_api.manifests import HttpRepoManifests
from bke.lab.standins.manifests import LabManifests
from .engine import Engine
from .health import HealthMonitor
from .known import KnownTargets
from .local_work import LocalPhases
from .metrics import watch_metrics
from bke.lab.standins.node_labels import LabNodes
from bke.adapters.cluster_api.node_labels import NodeLabelsWork
from .results import Inputs, upgraders_result
from .ops.rotation.run import RotationStore
from .ops.wiring import Deps, wire_operations
from bke.adapters.runner import Runner
from .service_events import ServiceEvents
from .settings import DispatcherSettings
from bke.adapters.state.command_signing import CommandSigning
from .state import DispatcherState
from .state_loss import StateLossReaction
from .status import StatusReader, StatusResponder

__all__ = ["create_service"]

log = logging.getLogger("bke.dispatcher")
E = TypeVar("E")


def runtime_json(raw: object) -> str | None:
    """A heartbeat's `runtime` as the canonical JSON stored for it; None when absent or not an
    AgentRuntime (never written: the upgrader reads only what parses)."""
    if not isinstance(raw, dict):
        return None
    try:
        return AgentRuntime.model_validate(raw).model_dump_json(by_alias=True)
    except ValueError:
        return None


def _now() -> datetime:
    return datetime.now(timezone.utc)


def join_first(join: Callable[[E], Awaitable[bool]], install: Callable[[E], Awaitable[None]]) -> Callable[[E], Awaitable[None]]:
    """An answer goes to the join it answers (a finished install is never reopened), else to the install."""

    async def handle(ev: E) -> None:
        if not await join(ev):
            await install(ev)

    return handle


def create_service(settings: DispatcherSettings | None = None) -> Service:
    settings = settings or DispatcherSettings()
    svc = make_service("dispatcher", settings)
    redis = redis_client(settings.store)
    state = DispatcherState(redis)
    plans = PlanCache(redis)
    files = RedisNodeFiles(redis)
    lab = settings.mode == "lab"
    if not lab or settings.cluster_api == "real":
        from bke.adapters.cluster_api.apply_k8s import KubernetesApplier
        from .k8s_nodes import KubernetesNodes

        applier = KubernetesApplier(redis)
        nodes_api: KubernetesNodes | None = KubernetesNodes(applier)
    else:
        applier = LabApplier()
        nodes_api = None
    # every command is signed with the deployment's key (made at deployment, or here, SET NX)
    signing = CommandSigning(redis, lambda: box_for("signing"))
    simulated_repo = lab and settings.repo_source == "auto"
    # the dashboard's latest events: what this dispatcher publishes about installs
    events = RecentEvents()
    publish, notify = events.watch(svc.publish), events.watch(svc.notify)
    engine = Engine(
        state, plans, files, publish,
        # the lab simulates the httpRepo (placeholders, a calico stand-in) unless told to use a
        # real one (`bke lab install --http-repo`, BKE_DISPATCHER_REPO_SOURCE=http-repo)
        LabChecksums() if simulated_repo else HttpRepoChecksums(),
        LocalPhases({
            "addons": AddonsWork(redis, applier, _now, LabManifests() if simulated_repo else HttpRepoManifests()),
            "node-labels": NodeLabelsWork(redis, nodes_api or LabNodes(), _now),
            "health": ApiHealthWork(redis, nodes_api, _now),  # the lab: nothing to ask an API
        }),
        _now, settings.owner, settings.lease_ms, notify=notify, sign=signing.sign_bytes, prefetch=signing.prefetch,
    )
    pause_flags = PauseFlags(redis, "dispatcher")
    runner = Runner(engine, state, paused=pause_flags.is_paused)
    pods = None
    if nodes_api is not None:  # real clusters: kube-system pods, every Node Ready, the CNI and CoreDNS
        api = nodes_api

        async def pods(plan):
            return {**await applier.pod_status(plan), **await periodic_doc(plan, api)}
    health = HealthMonitor(state, plans, svc.publish, _now, settings.health_interval_s, pods=pods, sign=signing.sign_bytes,
                           owner=settings.owner, prefetch=signing.prefetch)
    # the operations beside the install (rotation, reset, join, removal), each registered by its folder
    wired = wire_operations(Deps(
        svc=svc, redis=redis, state=state, plans=plans, files=files, checksums=engine.checksums,
        marker=nodes_api or LabNodes(), kubeconfig=None if nodes_api is None else applier.admin_kubeconfig,
        paused=pause_flags.is_paused, publish=publish, notify=notify, now=_now, owner=settings.owner,
        lease_ms=settings.lease_ms, sign=signing.sign, batch_size=settings.batch_size,
        agents_deadline_s=settings.join_agents_timeout_s))
    ops, joins = wired.operations, wired.joins
    serve_pause(svc, pause_flags, [runner.kick, *ops.held_by_pause()], _now)
    # a command-key rollover's announcements to every accepted agent, and their acknowledgements
    command_keys = CommandKeyCarrier(redis, signing.sign_bytes, svc.publish, _now, settings.command_key_announce_s)
    # results of another incarnation of their cluster are dropped and counted (bke.adapters.bus.other_incarnation)
    inputs = Inputs(state, runner.kick, _now, health.record, ops, other_incarnation=OtherIncarnation(svc.metrics, svc.name),
                    on_command_key=command_keys.on_result)

    # state lost (bke.adapters.state.epoch): stop the loops, fail the running installs; restored: resume
    async def stop_loops() -> None:
        await runner.stop()
        await ops.stop()

    async def resume_loops() -> list[str]:
        return await runner.resume_all() + await ops.resume_all()

    async def resume() -> list[str]:
        # a restored backup may predate results that were counted, acknowledged and lost since
        for cluster in await state.installs():
            asked = await engine.reask_in_flight(cluster)
            if asked:
                log.warning("state restored: commands in flight sent again to %s", ", ".join(asked[:10]),
                            extra={"cluster": cluster})
        return await resume_loops()

    loss = StateLossReaction(state, publish, _now, stop_loops, resume)
    epoch = watch_epoch(svc, redis, interval_s=settings.epoch_check_s, on_lost=loss.on_lost,
                        on_restored=loss.on_restored, on_intact=loss.on_intact)
    watch_metrics(svc, redis, plans)  # /metrics: installs, phases, nodes, commands in flight
    status_reader = StatusReader(redis, plans, rotation=RotationStore(redis).rotation_view)
    status = StatusResponder(status_reader, guard=epoch.ensure_intact)
    svc.http_routes.extend(dashboard_routes(DashboardReader(status_reader, state, plans, events, _now,
                                                              guard=epoch.ensure_intact)))

    services = ServiceEvents(state, plans, engine, runner.kick, _now)

    # sealed bundles and accepted agents may be what a join waits for
    async def certs_sealed(ev: CertsSealed) -> None:
        await services.certs_sealed(ev)
        joins.kick(ev.cluster)

    async def agent_accepted(ev: AgentAccepted) -> None:
        await services.agent_accepted(ev)
        joins.kick(ev.cluster)

    known = KnownTargets(state, plans)
    deleted: set[str] = set()  # clusters deleted since this process started (heartbeats dropped)

    async def forgotten(cluster: str) -> bool:
        """A deleted cluster's heartbeats and late answers (health rounds) write nothing."""
        if cluster not in deleted:
            return False
        if await redis.exists(plan_key(cluster)):
            deleted.discard(cluster)  # planned again under the same name
            return False
        return True

    cgroups: dict[tuple[str, str], int] = {}  # (cluster, node) -> the cgroup version last written
    runtimes: dict[tuple[str, str], str] = {}  # (cluster, node) -> the runtime JSON last written

    async def on_heartbeat(msg) -> None:
        if epoch.lost:  # nothing is written into a store that lost its state
            return
        # Advisory and not stored in a stream: a malformed one, one for a node of no stored
        # plan, or one on another node's subject is dropped without a write; an outage too.
        try:
            hb = json.loads(msg.data)
            cluster, node, at = str(hb["cluster"]), str(hb["node"]), str(hb["at"])
            if await forgotten(cluster):
                return
            if msg.subject != agent_subject(cluster, node, "heartbeat") or not await known.has_node(cluster, node):
                log.warning("heartbeat dropped: unknown node", extra={"cluster": cluster, "node": node,
                                                                     "rate_key": "heartbeat-unknown"})
                return
            await redis.hset(heartbeat_key(cluster), node, at)
            # the cgroup version the agent reports (the upgrader's CgroupV2 check), written only
            # when it changes: it does not change between two heartbeats of a running host
            cgroup = hb.get("cgroupVersion")
            if cgroup in (1, 2) and cgroups.get((cluster, node)) != cgroup:
                await redis.hset(heartbeat_cgroup_key(cluster), node, str(cgroup))
                cgroups[(cluster, node)] = cgroup
            # the agent's version, Python and platform (the upgrade's agents step picks each
            # node's wheels from it), likewise written when it changes: after an update; one
            # that does not parse is not written (the rest of the heartbeat still counts)
            runtime = runtime_json(hb.get("runtime"))
            if runtime is not None and runtimes.get((cluster, node)) != runtime:
                await redis.hset(heartbeat_runtime_key(cluster), node, runtime)
                runtimes[(cluster, node)] = runtime
        except (ValueError, KeyError, TypeError):
            return
        except Exception as exc:  # noqa: BLE001 - a Redis outage: the next heartbeat says the same
            log.warning("heartbeat not recorded: %s: %s", type(exc).__name__, exc, extra={"rate_key": "heartbeat-store"})

    async def on_result(res: CommandResult):
        if await forgotten(res.cluster):
            return []
        await known.check_result(res)  # a forged or stray result costs a read, never a write
        return await inputs.result(res)

    b = settings.batch_size
    def t(model, handler):
        return typed(model, handler, publish, notify)

    svc.work_subscriber(PLAN_CREATED, "BKE_EVENTS", "dispatcher-plans", t(PlanCreated, services.plan_created), batch_size=b)
    # the renderer's and certs service's answers: a join's when they answer one, else the install's
    for subject, durable, model, of_join, of_install in (
            (MANIFESTS_RENDERED, "dispatcher-rendered", ManifestsRendered, joins.rendered, services.rendered),
            (RENDER_FAILED, "dispatcher-render-failed", RenderFailed, joins.render_failed, services.render_failed),
            (CERTS_ISSUED, "dispatcher-certs-issued", CertsIssued, joins.certs_issued, services.certs_issued),
            (CERTS_FAILED, "dispatcher-certs-failed", CertsFailed, joins.certs_failed, services.certs_failed)):
        svc.work_subscriber(subject, "BKE_EVENTS", durable, t(model, join_first(of_join, of_install)),
                            batch_size=b)
    # one per sealed batch or registration: thousands per big install, so the lean consumer
    svc.fast_subscriber(CERTS_SEALED, "BKE_EVENTS", "dispatcher-certs-sealed", t(CertsSealed, certs_sealed))
    # an upgrader's result is acknowledged as it arrives (results.py would drop it too, after a
    # parse and three Redis reads: 15,000 in a 5,000-node upgrade)
    # a result or refusal on another node's subject is dropped and counted (bke.adapters.bus.misaddressed)
    misaddressed = Misaddressed(svc.metrics, svc.name)
    # a node's outputs that answer no command in flight, counted; past the bound, one summary
    # and one event per node and window instead of a dead letter each (bke.adapters.bus.flood)
    floods = FloodWatch(svc.metrics, svc.name, publish, _now)
    svc.fast_subscriber("bke.v1.agent.*.*.result", "BKE_AGENT_OUT", "dispatcher-results",
                        floods.guard("result", t(CommandResult, misaddressed.guard("result", on_result))),
                        skip=upgraders_result)
    # registrations go to the certs service only: the dispatcher learns a node's agent from
    # `certs.sealed` (the provisioned key), never from the agent's claim
    svc.fast_subscriber(AGENTS_ACCEPTED, "BKE_EVENTS", "dispatcher-agents-accepted", t(AgentAccepted, agent_accepted))
    svc.fast_subscriber("bke.v1.agent.*.*.refused", "BKE_AGENT_OUT", "dispatcher-refusals",
                        floods.guard("refused", t(CommandRefused, misaddressed.guard("refused", inputs.command_refused)),
                                     every=True))  # a refusal never settles a command
    svc.work_subscriber(AGENTS_REFUSED, "BKE_EVENTS", "dispatcher-agents-refused", t(AgentRefused, inputs.agent_refused),
                        batch_size=b)
    retry = t(RetryInstall, inputs.retry)
    svc.work_subscriber(RETRY_INSTALL, "BKE_COMMANDS", "dispatcher-retry", retry, batch_size=b)
    svc.work_subscriber(LEGACY_RETRY_REQUESTED, "BKE_COMMANDS", "dispatcher-retry-legacy",
                        deprecated(LEGACY_RETRY_REQUESTED, RETRY_INSTALL, retry), batch_size=b)
    # a deleted cluster's agents still beat until their identities are revoked: no key comes back
    serve_deleted(svc, redis, _now, after=deleted.add)

    async def on_status(msg) -> None:
        if answerable(msg):  # a publish without a reply inbox asks nothing
            await msg.respond(await status.answer(msg.data))

    core_subs = []
    background: list[asyncio.Task] = []
    stopping: list[bool] = []  # set once the service stops

    async def on_command_key(msg) -> None:
        if answerable(msg):  # the public half only; an agent is provisioned with it
            signer = await signing.signer()
            await msg.respond(CommandKey(public_line=signer.verify_key.public_line, key_id=signer.key_id).to_bytes())

    async def _started() -> None:
        nc = svc.nc
        core_subs.append(await nc.subscribe("bke.v1.heartbeat.>", cb=on_heartbeat))
        # core request/reply; the queue group shares requests between replicas
        core_subs.append(await nc.subscribe(STATUS_GET, queue=STATUS_QUEUE, cb=on_status))
        core_subs.append(await nc.subscribe(AGENTS_COMMAND_KEY, queue="dispatcher-command-key", cb=on_command_key))
        background.append(asyncio.create_task(_resume(), name="dispatcher:resume"))
        background.append(asyncio.create_task(command_keys.run(lambda: bool(stopping)), name="dispatcher:command-key"))
        health.start()

    async def _resume() -> None:
        # the running installs and operations, once Redis answers
        await svc.retry_while_store_away(resume_loops, lambda: bool(stopping), log)

    async def _stopping() -> None:
        stopping.append(True)
        for task in background:
            task.cancel()
        if background:
            # bounded: redis-py can swallow a cancellation while it connects; the flag ends the loop
            await asyncio.wait(background, timeout=2 * REDIS_PROBE_S)
        await stop_loops()
        await health.stop()
        await redis.aclose()

    svc.after_start.append(_started)
    svc.on_stop.insert(0, _stopping)
    return svc
