"""The upgrader's answer to an etcd restore request (bke_upgrader.restores), on a real Redis: a
request for no stored cluster, no such etcd cluster, no such snapshot, a snapshot whose record is
not from the agent BKE provisioned for its node, or a malformed one is refused naming why; a dry
run lists what stops and stores nothing; a real one is stored and announced, and a second one
while it runs is refused, and so is an upgrade (one operation per cluster: the slot); the status
request answers the view or names what is wrong; an ended restore frees the slot."""
from __future__ import annotations

import base64
from datetime import datetime, timezone

from bke.contracts.agent import AgentCommand, ProvisionAgent
from bke.contracts.restore import (
    RESTORE_ACCEPTED, RESTORE_REJECTED, EtcdRestoreAccepted, EtcdRestoreRejected, EtcdRestoreView, GetEtcdRestore,
    RestoreEtcd, restore_subject,
)
from bke.contracts.status import StatusError
from bke.core.etcdsnap.records import SnapshotRecord, object_name, record_bytes
from bke.adapters.etcdsnap.store import SnapshotNotFound
from bke.core.secrets.sealing import agent_key_id, generate_agent_key, public_key_to_raw
from bke.core.secrets.snapshot_key import SnapshotKey, record_mac
from bke.adapters.state import PlanCache, RedisPlanStore
from bke.adapters.state.keys.certs import provisioned_agents_key
from bke.adapters.state.keys.upgrader import etcd_restore_key
from bke.adapters.state.operation_slot import claim_operation, operation_holder
from bke_upgrader.ops.restore.pieces import PieceServer
from bke_upgrader.ops.restore.store import RestoreStore
from bke_upgrader.ports import RunSettings
from bke_upgrader.ops.restore.run import Restores, Snapshots
from bke_upgrader.store import UpgradeStore

from ..unit.upgrade_helpers import SEED, plan_of

NOW = datetime(2026, 12, 1, 9, 30, tzinfo=timezone.utc)
SID = "20261201t091500z-master1"
KEY = SnapshotKey.generate()


def _record(cluster: str, agent, **change) -> SnapshotRecord:  # type: ignore[no-untyped-def]
    rec = SnapshotRecord(snapshot_id=SID, cluster=cluster, etcd_cluster="etcd-data", member="master1", node="master1",
                         revision=42, size=1056, sha256="ef" * 32, sealed_to=KEY.key_id, taken_at=NOW.isoformat(),
                         object_name=object_name(cluster, "etcd-data", SID), agent_id=agent_key_id(agent.public_key()))
    rec = rec.model_copy(update={"mac": record_mac(agent, KEY.public, record_bytes(rec))})
    return rec.model_copy(update=change)


async def _restores(redis_client):  # type: ignore[no-untyped-def]
    plan = plan_of(SEED)
    pj = plan.to_json()
    await RedisPlanStore(redis_client).save(plan, pj, "d1", "req-1", NOW.isoformat())
    agent = generate_agent_key()
    prov = ProvisionAgent(cluster=plan.cluster, node="master1", agent_id=agent_key_id(agent.public_key()),
                          seal_public_key_b64=base64.b64encode(public_key_to_raw(agent.public_key())).decode())
    await redis_client.hset(provisioned_agents_key(plan.cluster), "master1", prov.model_dump_json(by_alias=True))
    records = {SID: _record(plan.cluster, agent)}

    async def find(cluster: str, etcd_cluster: str, sid: str) -> SnapshotRecord:
        if sid not in records or etcd_cluster != "etcd-data":
            raise SnapshotNotFound(f"no snapshot {sid!r} of {etcd_cluster} in cluster {cluster}")
        return records[sid]

    async def key() -> SnapshotKey:
        return KEY

    async def publish(data: bytes, subject: str, headers: dict[str, str]) -> None:
        raise AssertionError("a request publishes nothing itself")

    async def sign(cmd: AgentCommand) -> AgentCommand:
        return cmd

    store = RestoreStore(redis_client)
    restores = Restores(store, UpgradeStore(redis_client), PlanCache(redis_client),
                        Snapshots(find, key, PieceServer(store, lambda: None, key)),  # type: ignore[arg-type, return-value]
                        publish, sign, RunSettings("test", 5000, lambda: NOW))  # type: ignore[arg-type]
    return restores, plan, records


def _req(cluster: str, **change) -> RestoreEtcd:  # type: ignore[no-untyped-def]
    return RestoreEtcd(request_id="r1", cluster=cluster, etcd_cluster="etcd-data", snapshot_id=SID).model_copy(
        update=change)


async def test_requests_that_cannot_be_restored_are_refused_naming_why(redis_client):
    restores, plan, records = await _restores(redis_client)

    async def refusal(req: RestoreEtcd) -> str:
        (out,) = await restores.on_request(req)
        assert out.subject == RESTORE_REJECTED and isinstance(out.message, EtcdRestoreRejected)
        return out.message.message

    assert await refusal(_req("nope")) == "cluster: no cluster 'nope' is stored in this deployment"
    assert (await refusal(_req(plan.cluster, etcd_cluster="etcd-x"))).startswith(
        f"etcdCluster: cluster {plan.cluster} has no etcd cluster 'etcd-x'")
    assert (await refusal(_req(plan.cluster, snapshot_id="20261201t000000z-x"))).startswith("snapshotId: no snapshot")
    other = generate_agent_key()  # a record whose MAC is not the provisioned agent's
    records[SID] = _record(plan.cluster, other)
    assert "not written by the agent BKE provisioned for master1" in await refusal(_req(plan.cluster))
    (out,) = await restores.on_request_bytes(b'{"requestId": "r2", "cluster": "c", "etcdCluster": "etcd-data"}')
    assert out.subject == RESTORE_REJECTED and "snapshotId" in out.message.message
    assert await redis_client.get(etcd_restore_key(plan.cluster)) is None  # nothing was stored


async def test_a_dry_run_lists_what_stops_and_a_run_is_stored_once_per_cluster(redis_client):
    restores, plan, _ = await _restores(redis_client)
    kicked: list[str] = []
    restores.kick = kicked.append
    (out,) = await restores.on_request(_req(plan.cluster, dry_run=True))
    assert out.subject == RESTORE_ACCEPTED and isinstance(out.message, EtcdRestoreAccepted)
    assert out.message.stops == [f"kube-apiserver on master{i}" for i in (1, 2, 3)] + [
        f"etcd-data member on master{i}" for i in (1, 2, 3)]
    assert [s.name for s in out.message.stages][0] == "verify-snapshot" and out.message.revision == 42
    assert await redis_client.get(etcd_restore_key(plan.cluster)) is None and not kicked

    accepted, changed = await restores.on_request(_req(plan.cluster))
    assert accepted.subject == RESTORE_ACCEPTED and changed.subject == restore_subject(plan.cluster)
    assert kicked == [plan.cluster]
    run = await restores.store.load(plan.cluster)
    assert run is not None and run.status == "Running" and run.sha256 == "ef" * 32
    assert await restores.on_request(_req(plan.cluster)) == []  # a redelivery of the same request
    (second,) = await restores.on_request(_req(plan.cluster, request_id="r2"))
    assert second.subject == RESTORE_REJECTED
    assert second.message.message == f"etcd restore r1 of etcd-data in {plan.cluster} is running: one operation per cluster"
    # the restore holds the cluster's operation slot: an upgrade's claim is refused naming it
    upgrade = await claim_operation(redis_client, plan.cluster, "upgrade", "u1", "t1")
    assert not upgrade.won and upgrade.refusal(plan.cluster).startswith(f"etcd restore r1 of etcd-data in {plan.cluster} is running")
    assert (await claim_operation(redis_client, "other", "upgrade", "u1", "t1")).won  # another cluster's slot is its own


async def test_status_request_answers_the_view_or_names_what_is_wrong(redis_client):
    restores, plan, _ = await _restores(redis_client)
    none = StatusError.model_validate_json(await restores.answer_get(GetEtcdRestore(cluster=plan.cluster).to_bytes()))
    assert none.reason == "NotFound" and none.message == f"cluster '{plan.cluster}': no etcd restore"
    bad = StatusError.model_validate_json(await restores.answer_get(b'{"cluster": "", "zz": 1}'))
    assert bad.reason == "Invalid" and {e.path for e in bad.errors} == {"cluster", "zz"}
    assert StatusError.model_validate_json(await restores.answer_get(b"[" * 100_000)).reason == "Invalid"
    await restores.on_request(_req(plan.cluster))
    view = EtcdRestoreView.model_validate_json(await restores.answer_get(GetEtcdRestore(cluster=plan.cluster).to_bytes()))
    assert (view.request_id, view.etcd_cluster, view.status, view.stage) == ("r1", "etcd-data", "Running", "verify-snapshot")
    assert [s.name for s in view.stages][0] == "verify-snapshot"


async def test_a_finished_restore_frees_the_slot_and_a_resume_heals_a_missed_release(redis_client):
    restores, plan, _ = await _restores(redis_client)
    await restores.on_request(_req(plan.cluster))
    run = await restores.store.load(plan.cluster)
    assert run is not None
    run.status, run.finished_at = "Failed", "t2"  # as a pass that ended it, then died before releasing
    await restores.store.save(run)
    assert await operation_holder(redis_client, plan.cluster) is not None
    assert await restores.resume_all() == []
    assert await operation_holder(redis_client, plan.cluster) is None
    assert (await claim_operation(redis_client, plan.cluster, "upgrade", "u1", "t3")).won
