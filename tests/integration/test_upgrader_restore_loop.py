"""The etcd restore on the one operation loop (bke_upgrader.ops.restore), on a real Redis: a pass
verifies the stored snapshot, then sends each stage's commands (signed as the upgrader's, with
an expiry) to every node of the stage and waits for all of them; the record is stored at the
stage before its commands go out (the piece server serves only that stage); an answer from an
agent that is not the node's accepted one is dropped; the last stage's answers end it Succeeded,
the slot freed and the sealed copy gone. A failed node ends it Failed naming the node and step;
a snapshot whose bytes differ from its record stops nothing."""
from __future__ import annotations

import base64
import hashlib
import io
import json
from pathlib import Path

import pytest

from bke.contracts.agent import AgentCommand, CommandResult, ProvisionAgent, StepResult
from bke.contracts.restore import EtcdRestoreChanged, restore_subject
from bke.core.etcdsnap.records import SnapshotRecord, object_name, record_bytes
from bke.core.etcdsnap.restore import STAGES
from bke.core.etcdsnap.restore_run import restore_command_id
from bke.core.etcdsnap.sealed_stream import seal_stream
from bke.core.secrets.sealing import agent_key_id, generate_agent_key, public_key_to_raw
from bke.core.secrets.snapshot_key import SnapshotKey, record_mac
from bke.adapters.state import PlanCache, RedisPlanStore
from bke.adapters.state.keys.certs import provisioned_agents_key
from bke.adapters.state.operation_slot import operation_holder
from bke_upgrader.ops.restore.pieces import PieceServer
from bke_upgrader.ops.restore.run import Restores, Snapshots
from bke_upgrader.ops.restore.store import RestoreStore
from bke_upgrader.ports import RunSettings
from bke_upgrader.store import UpgradeStore

from ..unit.upgrade_helpers import SEED, plan_of
from .test_upgrader_restores import KEY, NOW, SID, _req

pytestmark = pytest.mark.integration
MASTERS = ("master1", "master2", "master3")
DATA = b"etcd snapshot bytes " * 300


class Lab:
    def __init__(self, restores: Restores, sent: list[tuple[str, bytes]], stored_stage: dict[str, str], cluster: str):
        self.restores, self.sent, self.stored_stage, self.cluster = restores, sent, stored_stage, cluster

    def commands(self) -> list[AgentCommand]:
        return [AgentCommand.model_validate_json(b) for s, b in self.sent if s.endswith(".command")]

    def changed(self) -> list[EtcdRestoreChanged]:
        return [EtcdRestoreChanged.model_validate_json(b) for s, b in self.sent if s == restore_subject(self.cluster)]

    def answer(self, stage: str, host: str, status: str = "Succeeded", agent: str = "") -> CommandResult:
        step = StepResult(id="park:kube-apiserver", status=status, stderr="" if status == "Succeeded" else "port open")
        return CommandResult(command_id=restore_command_id(self.cluster, "r1", stage, host), cluster=self.cluster,
                             node=host, agent_id=agent or f"agent-{host}", status=status, steps=[step],
                             started_at="t", finished_at="t")


async def _lab(redis_client, tmp_path: Path, recorded_sha: str = "") -> Lab:  # type: ignore[no-untyped-def]
    plan = plan_of(SEED)
    c = plan.cluster
    await RedisPlanStore(redis_client).save(plan, plan.to_json(), "d1", "req-1", NOW.isoformat())
    agent = generate_agent_key()
    prov = ProvisionAgent(cluster=c, node="master1", agent_id=agent_key_id(agent.public_key()),
                          seal_public_key_b64=base64.b64encode(public_key_to_raw(agent.public_key())).decode())
    await redis_client.hset(provisioned_agents_key(c), "master1", prov.model_dump_json(by_alias=True))
    rec = SnapshotRecord(snapshot_id=SID, cluster=c, etcd_cluster="etcd-data", member="master1", node="master1",
                         revision=42, size=len(DATA), sha256=recorded_sha or hashlib.sha256(DATA).hexdigest(),
                         sealed_to=KEY.key_id, taken_at=NOW.isoformat(), object_name=object_name(c, "etcd-data", SID),
                         agent_id=agent_key_id(agent.public_key()))
    rec = rec.model_copy(update={"mac": record_mac(agent, KEY.public, record_bytes(rec))})

    async def find(cluster: str, etcd_cluster: str, sid: str) -> SnapshotRecord:
        return rec

    async def key() -> SnapshotKey:
        return KEY

    store = RestoreStore(redis_client)
    pieces = PieceServer(store, lambda: None, key, directory=tmp_path)  # type: ignore[arg-type, return-value]
    # the stored object, copied already (ensure_copy keeps a copy it finds)
    pieces.sealed_path("r1").write_bytes(b"".join(seal_stream(io.BytesIO(DATA).read, KEY.public, 1000)))
    sent: list[tuple[str, bytes]] = []
    stored_stage: dict[str, str] = {}

    async def publish(body: bytes, subject: str, headers: dict[str, str]) -> None:
        sent.append((subject, body))
        if subject.endswith(".command"):  # what the piece server would read as the agent asks
            run = await store.load(c)
            now = run.stage_now() if run is not None else None
            stored_stage[json.loads(body)["phase"]] = now.name if now else ""

    async def sign(cmd: AgentCommand) -> AgentCommand:
        return cmd

    restores = Restores(store, UpgradeStore(redis_client), PlanCache(redis_client), Snapshots(find, key, pieces),
                        publish, sign, RunSettings("test", 5000, lambda: NOW))
    (accepted, _) = await restores.on_request(_req(c))
    assert accepted.subject == "bke.v1.etcd-restore.accepted"
    return Lab(restores, sent, stored_stage, c)


async def test_a_restore_runs_stage_by_stage_to_its_end(redis_client, tmp_path: Path) -> None:
    lab = await _lab(redis_client, tmp_path)
    r, c = lab.restores, lab.cluster
    for stage in [s.name for s in STAGES][1:]:
        out = await r.reconcile(c)
        assert out.status == "wait"
        cmds = [x for x in lab.commands() if x.phase == f"etcd-restore:{stage}"]
        assert sorted(x.node for x in cmds) == list(MASTERS)
        assert {(x.issuer, x.expires_at) for x in cmds} == {("upgrader", "2026-12-01T10:30:00+00:00")}
        assert lab.stored_stage[f"etcd-restore:{stage}"] == stage  # stored at the stage before it went out
        assert (await r.store.load(c)).stage_now().name == stage
        await r.on_result(lab.answer(stage, "master1", agent="someone-else"))  # not the accepted agent: dropped
        for host in MASTERS[:2]:
            await r.on_result(lab.answer(stage, host))
        assert (await r.reconcile(c)).status == "wait"  # master3 still runs: the stage waits for it
        assert len([x for x in lab.commands() if x.phase == f"etcd-restore:{stage}"]) == 3  # nothing sent again
        await r.on_result(lab.answer(stage, "master3"))
    assert (await r.reconcile(c)).status == "done"
    run = await r.store.load(c)
    assert run is not None and run.status == "Succeeded" and run.finished_at == NOW.isoformat()
    assert lab.changed()[-1].restore.status == "Succeeded"
    assert await operation_holder(redis_client, c) is None
    assert not r.pieces.sealed_path("r1").exists()  # its sealed copy went with its end
    assert (await r.reconcile(c)).status == "done" and await r.resume_all() == []


async def test_a_failed_node_ends_the_restore_naming_it(redis_client, tmp_path: Path) -> None:
    lab = await _lab(redis_client, tmp_path)
    r, c = lab.restores, lab.cluster
    assert (await r.reconcile(c)).status == "wait"
    await r.on_result(lab.answer("stop-apiservers", "master1"))
    await r.on_result(lab.answer("stop-apiservers", "master2", "Failed"))
    await r.on_result(lab.answer("stop-apiservers", "master3"))
    out = await r.reconcile(c)
    assert out.status == "failed"
    assert out.reason == "stop-apiservers failed on master2 (agent step park:kube-apiserver): port open"
    assert lab.changed()[-1].restore.status == "Failed" and await operation_holder(redis_client, c) is None
    assert not [x for x in lab.commands() if x.phase == "etcd-restore:stop-members"]


async def test_a_snapshot_whose_bytes_differ_stops_nothing(redis_client, tmp_path: Path) -> None:
    lab = await _lab(redis_client, tmp_path, recorded_sha="ef" * 32)
    out = await lab.restores.reconcile(lab.cluster)
    assert out.status == "failed" and "its bytes do not match its recorded sha256; nothing was stopped" in out.reason
    assert lab.commands() == []
