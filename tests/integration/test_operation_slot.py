"""One operation per cluster (bke.adapters.state.operation_slot) on the real Redis of the session fixture.

- Of N concurrent claims of different kinds for one cluster, from several clients (replicas of
  several services), exactly one wins and every loser is told the winner's kind and request id.
- A claim is idempotent for its own (kind, request id) (a redelivery, a resumed replica), only
  the holder releases it, and a slot written by a newer BKE is refused, never misread.
- Through the services' own request handlers: a reset running refuses an upgrade and an upgrade
  running (a retry) refuses a reset; a certificate rotation running refuses an etcd restore and a
  restore running refuses a rotation, each naming the one that runs; an ended operation frees
  the slot; `bke status` shows the latest reset and the slot's holder.
- `bke etcd restore status NAME` asks the upgrader's answer over a real NATS.
"""
from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
from datetime import datetime, timezone

import pytest
from redis.asyncio import Redis

from bke.contracts.certs import CertsRenewed, RenewedCertificate
from bke.contracts.reset import ResetCluster
from bke.contracts.restore import RESTORE_GET
from bke.contracts.rotation import RotationChanged
from bke.contracts.status import ClusterStatus, GetStatus, NodeCounts
from bke.contracts.upgrade import UPGRADE_REJECTED, RetryUpgrade, UpgradeCluster, UpgradeRejected
from bke.adapters.state import PlanCache, RedisPlanStore, plan_digest
from bke.adapters.state.keys.shared import operation_key
from bke.adapters.state.operation_slot import KINDS, claim_operation, operation_holder, release_operation
from bke.core.state.schema import StoredVersionTooNew
from bke_dispatcher.ops.reset.run import Resets, ResetStore
from bke_dispatcher.ops.rotation.run import Rotations, RotationStore
from bke_dispatcher.state import DispatcherState
from bke_dispatcher.status import StatusReader
from bke_upgrader.facts import LiveFacts
from bke_upgrader.operation import Upgrades
from bke_upgrader.ports import ClusterApi, Commands, Records, RunSettings
from bke_upgrader.renders import Renders
from bke_upgrader.store import UpgradeStore
from tests.agent_facts_helpers import with_agent_facts
from tests.trust_helpers import signed

from .test_upgrader_restores import _req as restore_req
from .test_upgrader_restores import _restores
from .test_upgrader_retry import _setup as retry_setup

pytestmark = pytest.mark.integration
NOW = datetime(2026, 6, 1, tzinfo=timezone.utc)


class Key:
    async def recipient(self) -> str:
        return "A" * 43 + "="


async def test_of_many_concurrent_claims_of_every_kind_exactly_one_wins_and_the_losers_name_it(redis_url, redis_client):
    replicas = [Redis.from_url(redis_url) for _ in range(6)]  # separate connections: claims really interleave
    try:
        for round_ in range(20):
            cluster = f"c{round_}"
            asks = [(kind, f"{kind}-{i}") for kind in KINDS for i in range(5)]  # 35 claims, 7 kinds
            random.Random(round_).shuffle(asks)
            claims = await asyncio.gather(*(claim_operation(replicas[i % len(replicas)], cluster, kind, rid, f"t{i}")
                                            for i, (kind, rid) in enumerate(asks)))
            winners = [(kind, rid) for (kind, rid), c in zip(asks, claims) if c.won]
            assert len(winners) == 1, winners
            kind, rid = winners[0]
            for c in claims:
                assert (c.holder.kind, c.holder.request_id) == (kind, rid)
                if not c.won:
                    assert c.refusal(cluster).endswith(f" {rid} of {cluster} is running: one operation per cluster")
            held = await operation_holder(redis_client, cluster)
            assert held is not None and (held.kind, held.request_id) == (kind, rid)
    finally:
        for r in replicas:
            await r.aclose()


async def test_a_claim_is_found_again_only_the_holder_releases_and_a_newer_slot_is_refused(redis_client):
    first = await claim_operation(redis_client, "c", "upgrade", "u1", "t0")
    again = await claim_operation(redis_client, "c", "upgrade", "u1", "t9")  # a redelivery, a resumed replica
    assert first.won and again.won and again.holder.since == "t0"  # the first claim's time is kept
    other = await claim_operation(redis_client, "c", "reset", "u1", "t1")  # same id, another kind: not the same
    assert not other.won and other.refusal("c") == "upgrade u1 of c is running: one operation per cluster"
    assert not await release_operation(redis_client, "c", "reset", "u1")
    assert not await release_operation(redis_client, "c", "upgrade", "u2")
    assert await release_operation(redis_client, "c", "upgrade", "u1")
    assert not await release_operation(redis_client, "c", "upgrade", "u1")  # idempotent
    assert await operation_holder(redis_client, "c") is None
    assert (await claim_operation(redis_client, "c", "apply", "a1", "t2")).won  # the next operation may start
    with pytest.raises(ValueError, match="kind: 'upgrade-all'"):
        await claim_operation(redis_client, "c", "upgrade-all", "x", "t")
    with pytest.raises(ValueError, match="requestId"):
        await claim_operation(redis_client, "c", "reset", "", "t")
    await redis_client.hset(operation_key("c"), "schemaVersion", "2")  # written by a newer BKE
    with pytest.raises(StoredVersionTooNew):
        await claim_operation(redis_client, "c", "reset", "r1", "t")
    with pytest.raises(StoredVersionTooNew):
        await operation_holder(redis_client, "c")


def _upgrades(redis: Redis) -> Upgrades:
    """The upgrader's request handler; the dispatcher's status answer is an installed cluster."""

    async def dispatcher(subject: str, payload: bytes, timeout: float) -> bytes:
        cluster = GetStatus.model_validate_json(payload).cluster
        return ClusterStatus(cluster=cluster, status="Succeeded", request_id="install-1", phases=[],
                             node_counts=NodeCounts(total=0), node_selection="none", nodes=[],
                             nodes_matched=0).to_bytes()

    def now() -> datetime:
        return NOW

    facts = LiveFacts(with_agent_facts(redis, dispatcher), now, heartbeat_stale_s=90.0, timeout_s=1.0)
    return Upgrades(Records(UpgradeStore(redis), PlanCache(redis), RedisPlanStore(redis), facts),
                    Commands(None, None, Renders(), None, None), ClusterApi(None, None),  # type: ignore[arg-type]
                    RunSettings("slot-test", 30_000, now))


def _resets(r: Redis, sent: list) -> Resets:
    async def publish(body: bytes, subject: str, headers: dict[str, str]) -> None:
        sent.append((subject, body))

    async def not_paused(cluster: str) -> bool:
        return False

    async def sign(cmd):  # type: ignore[no-untyped-def]
        return signed(cmd)

    return Resets(ResetStore(r), RotationStore(r), DispatcherState(r), PlanCache(r), not_paused, Key(), publish,
                  lambda: NOW, "me", kick=lambda c: None, sign=sign)


async def test_a_running_reset_refuses_an_upgrade_and_status_shows_both(redis_url, redis_client):
    from bke.core.plan import plan_spec_text

    plan = plan_spec_text(open("examples/seed-3m1w.yaml").read().replace("name: seed", "name: rst")).plan
    r = Redis.from_url(redis_url)
    try:
        pj = plan.to_json()
        await RedisPlanStore(r).save(plan, pj, plan_digest(pj), "req", NOW.isoformat())
        state = DispatcherState(r)
        await state.start_install("rst", "req", NOW.isoformat())
        await state.set_install("rst", status="Succeeded")
        sent: list = []
        [accepted] = await _resets(r, sent).on_request(ResetCluster(request_id="z1", cluster="rst"))
        assert accepted.subject == "bke.v1.reset.accepted"

        [out] = await _upgrades(r).on_request(UpgradeCluster(request_id="u1", cluster="rst", kubernetes_version="v1.34.1"))
        assert out.subject == UPGRADE_REJECTED and isinstance(out.message, UpgradeRejected)
        assert out.message.message == "reset z1 of rst is running: one operation per cluster"
        [dry] = await _upgrades(r).on_request(UpgradeCluster(request_id="u2", cluster="rst", kubernetes_version="v1.34.1",
                                                             dry_run=True))
        assert dry.message.message == "reset z1 of rst is running: one operation per cluster"  # a dry run is told too
        assert await UpgradeStore(r).load("rst") is None  # nothing started

        status = await StatusReader(r, PlanCache(r)).read(GetStatus(cluster="rst"))
        assert isinstance(status, ClusterStatus)
        assert status.reset is not None and (status.reset.request_id, status.reset.status, status.reset.delete) == (
            "z1", "Running", False)
        assert status.operation is not None and (status.operation.kind, status.operation.request_id) == ("reset", "z1")
        assert ClusterStatus.model_validate_json(status.to_bytes()) == status  # the wire form reads back
    finally:
        await r.aclose()


async def test_a_running_upgrade_refuses_a_reset(redis_url, redis_client):
    plan, left, _, store, retries, _ = await retry_setup(redis_client)
    accepted, _ = await retries.on_retry(RetryUpgrade(request_id="r4", cluster=plan.cluster, nodes=[left]))
    assert accepted.subject != UPGRADE_REJECTED
    r = Redis.from_url(redis_url)
    try:
        state = DispatcherState(r)
        await state.start_install(plan.cluster, "install-1", NOW.isoformat())
        await state.set_install(plan.cluster, status="Succeeded")
        [out] = await _resets(r, []).on_request(ResetCluster(request_id="z1", cluster=plan.cluster))
        assert out.subject == "bke.v1.reset.rejected"
        assert out.message.message == f"upgrade r4 of {plan.cluster} is running: one operation per cluster"
        assert await ResetStore(r).load(plan.cluster) is None
        # the upgrade ends (as its last pass leaves it): a pass frees the slot, the reset may start
        run = await store.load(plan.cluster)
        run.status, run.finished_at = "Succeeded", "t9"
        await store.save(run)
        await retries.up.reconcile(plan.cluster)
        [ok] = await _resets(r, []).on_request(ResetCluster(request_id="z2", cluster=plan.cluster))
        assert ok.subject == "bke.v1.reset.accepted"
    finally:
        await r.aclose()


def _rotations(r: Redis, sent: list) -> Rotations:
    from bke.adapters.state.nodefiles import RedisNodeFiles

    async def publish(body: bytes, subject: str, headers: dict[str, str]) -> None:
        sent.append((subject, body))

    async def sign(cmd):  # type: ignore[no-untyped-def]
        return signed(cmd)

    return Rotations(RotationStore(r), DispatcherState(r), PlanCache(r), RedisNodeFiles(r), publish, lambda: NOW, "me",
                     kick=lambda c: None, sign=sign)


def _renewed(cluster: str, rid: str) -> CertsRenewed:
    certs = [RenewedCertificate(name="apiserver", instance=f"apiserver@{h}", nodes=[h], serial="1", not_after="x")
             for h in ("master1", "master2", "master3")]
    return CertsRenewed(request_id=rid, cluster=cluster, certificates=certs, at="t")


async def test_a_running_rotation_refuses_a_restore_and_a_running_restore_refuses_a_rotation(redis_url, redis_client):
    restores, plan, _ = await _restores(redis_client)
    c = plan.cluster
    r = Redis.from_url(redis_url)
    try:
        state = DispatcherState(r)
        await state.start_install(c, "install-1", NOW.isoformat())
        await state.set_install(c, status="Succeeded")
        sent: list = []
        rotations = _rotations(r, sent)

        # a rotation runs: a restore is refused naming it
        await rotations.on_renewed(_renewed(c, "rot1"))
        assert RotationChanged.model_validate_json(sent[-1][1]).rotation.status == "Running"
        [out] = await restores.on_request(restore_req(c))
        assert out.message.message == f"certificate rotation rot1 of {c} is running: one operation per cluster"
        assert await restores.store.load(c) is None

        # it ends: the slot is free, a restore starts, and a rotation is refused naming the restore
        rot = await rotations.store.load(c)
        rot.status, rot.finished_at = "Succeeded", "t1"
        await rotations.store.save(rot)
        assert (await rotations.reconcile(c)).status == "done"
        assert await operation_holder(redis_client, c) is None
        accepted, _ = await restores.on_request(restore_req(c))
        assert accepted.subject == "bke.v1.etcd-restore.accepted"
        await rotations.on_renewed(_renewed(c, "rot2"))
        refused = RotationChanged.model_validate_json(sent[-1][1]).rotation
        assert (refused.request_id, refused.status) == ("rot2", "Failed")
        assert refused.message == f"etcd restore r1 of etcd-data in {c} is running: one operation per cluster"
        holder = await operation_holder(redis_client, c)
        assert holder is not None and (holder.kind, holder.request_id) == ("etcd-restore", "r1")
    finally:
        await r.aclose()


def _bke(*argv: str) -> "subprocess.CompletedProcess[str]":
    return subprocess.run([sys.executable, "-m", "bke_cli.main", *argv], capture_output=True, text=True, timeout=120,
                          check=False)


async def test_bke_etcd_restore_status_asks_the_upgrader_over_the_bus(redis_client, nats_client, nats_url):
    restores, plan, _ = await _restores(redis_client)

    async def answer(msg) -> None:  # type: ignore[no-untyped-def]  # the upgrader's subscription (app.py)
        await msg.respond(await restores.answer_get(msg.data))

    sub = await nats_client.subscribe(RESTORE_GET, queue="upgrader-get", cb=answer)
    try:
        none = await asyncio.to_thread(_bke, "etcd", "restore", "status", plan.cluster, "--nats", nats_url)
        assert none.returncode == 2 and f"cluster '{plan.cluster}': no etcd restore" in none.stderr + none.stdout
        await restores.on_request(restore_req(plan.cluster))
        shown = await asyncio.to_thread(_bke, "etcd", "restore", "status", plan.cluster, "--nats", nats_url)
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.startswith(f"etcd restore r1 of etcd-data in {plan.cluster} from ")
        assert "Running (stage verify-snapshot)" in shown.stdout and "verify-snapshot" in shown.stdout.splitlines()[2]
        as_json = await asyncio.to_thread(_bke, "etcd", "restore", "status", plan.cluster, "-o", "json", "--nats", nats_url)
        assert json.loads(as_json.stdout)["requestId"] == "r1"
        wrong = await asyncio.to_thread(_bke, "etcd", "restore", plan.cluster, "extra", "--nats", nats_url)
        assert wrong.returncode == 2 and "unexpected argument" in wrong.stderr + wrong.stdout
        missing = await asyncio.to_thread(_bke, "etcd", "restore", plan.cluster, "--snapshot", "s", "--nats", nats_url)
        assert missing.returncode == 2 and "--etcd-cluster: required" in missing.stderr + missing.stdout
    finally:
        await sub.unsubscribe()


async def test_an_install_holds_the_slot_while_it_runs_and_one_refused_by_another_fails_naming_it(redis_url, redis_client):
    from bke.contracts import PlanCreated
    from bke.adapters.state.nodefiles import RedisNodeFiles
    from bke_dispatcher.ops.install.commands import InstallCommands
    from bke_dispatcher.ops.install.run import Installs
    from bke_dispatcher.ops.install.store import InstallStore
    from bke_dispatcher.service_events import ServiceEvents

    from .test_dispatcher import _stored_cluster

    r = Redis.from_url(redis_url)
    sent: list = []

    async def publish(body: bytes, subject: str, headers: dict[str, str]) -> None:
        sent.append((subject, body))

    try:
        state, plans = DispatcherState(r), PlanCache(r)
        commands = InstallCommands(state, RedisNodeFiles(r), None, publish, publish, lambda: NOW, signed)  # type: ignore[arg-type]
        installs = Installs(InstallStore(state), plans, commands, None, lambda: NOW, "me")  # type: ignore[arg-type]
        events = ServiceEvents(state, plans, installs, lambda c, at_once=False: None, lambda: NOW)
        for name in ("ins", "busy"):
            _, digest = await _stored_cluster(r, name)
            ev = PlanCreated(request_id=f"req-{name}", cluster=name, plan_key=f"bke:{name}:plan", plan_digest=digest,
                             nodes=4, etcd_clusters=["etcd-data"])
            if name == "busy":  # a reset of this cluster holds the slot when its plan arrives
                assert (await claim_operation(r, name, "reset", "z1", "t0")).won
            await events.plan_created(ev)
            await events.plan_created(ev)  # a redelivery: the same claim, nothing else

        held = await operation_holder(r, "ins")
        assert held is not None and (held.kind, held.request_id) == ("install", "req-ins")
        up = await claim_operation(r, "ins", "upgrade", "u1", "t1")
        assert up.refusal("ins") == "install req-ins of ins is running: one operation per cluster"
        # the install ends (compare-and-set): the slot goes in the same step
        assert await state.finish_install("ins", "req-ins", status="Succeeded", finishedAt="t2")
        assert await operation_holder(r, "ins") is None

        busy = await state.install("busy")
        assert busy["status"] == "Failed" and busy["message"] == "reset z1 of busy is running: one operation per cluster"
        held = await operation_holder(r, "busy")
        assert held is not None and (held.kind, held.request_id) == ("reset", "z1")  # untouched
    finally:
        await r.aclose()
