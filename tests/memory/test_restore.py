"""An etcd restore in memory: a snapshot taken by master1's agent (its own snapshot code, sealed
to the deployment's key and stored in chunks, fleet.py), then restored over the cluster's three
members (the upgrader checks the record's author and the bytes' sha256, stops, restores and
starts in stages); and a restore whose member fails a stage."""
from __future__ import annotations

import json
import uuid
from datetime import datetime, timezone

import pytest

from bke.adapters.state.command_signing import read_bindings
from bke.adapters.state.keys.trust import etcd_snapshot_key
from bke.contracts.agent import AgentCommand, agent_subject
from bke.contracts.restore import RESTORE_ETCD, RestoreEtcd, restore_subject
from bke.contracts.statuses import FinishedStatus
from bke.core.etcdsnap.step import snapshot_step
from bke.core.secrets import keyring_for
from bke.core.secrets.signing import sign_command
from bke.core.secrets.snapshot_key import ensure_snapshot_key
from bke.core.upgrade.run import upgrade_command_id
from tests.trust_helpers import deployment_key

from .lab import Fault, MemoryLab, plan_of, spec

pytestmark = pytest.mark.memory
ENDED = ("Succeeded", "Failed")


async def _snapshot(lab: MemoryLab, cluster: str, node: str = "master1") -> str:
    """master1's etcd-data snapshot, asked as the upgrader's etcd-snapshots step asks it; its id."""
    plan = plan_of(spec(cluster))
    key = await ensure_snapshot_key(lab.redis, etcd_snapshot_key(), keyring_for("snapshot").box())
    signer, bindings = await deployment_key(lab.redis, lab.box), await read_bindings(lab.redis, cluster, [node])
    now, rid = datetime.now(timezone.utc), uuid.uuid4().hex
    step = snapshot_step(plan, "etcd-data", node, key.public_b64, now, request_id=rid)
    cmd = AgentCommand(command_id=upgrade_command_id(cluster, rid, "etcd-snapshots", "etcd-data", node), cluster=cluster,
                       node=node, phase="upgrade:etcd-snapshots", issued_at=now.isoformat(), steps=[step])
    mark = len(lab.router.log)
    await lab.nc.jetstream().publish(agent_subject(cluster, node, "command"),
                                     sign_command(cmd, signer, binding=bindings[node]).to_bytes())
    result = await lab.wait(agent_subject(cluster, node, "result"), lambda d: d["commandId"] == cmd.command_id, start=mark)
    assert result["status"] == "Succeeded" and "etcd's hash checked" in result["steps"][0]["stdout"], result
    return step.snapshot_id


async def _restore(lab: MemoryLab, cluster: str, sid: str) -> dict:
    req = RestoreEtcd(request_id=uuid.uuid4().hex, cluster=cluster, etcd_cluster="etcd-data", snapshot_id=sid)
    mark = await lab.send(RESTORE_ETCD, req)
    done = await lab.wait(restore_subject(cluster), lambda d: d["restore"]["status"] in ENDED, start=mark)
    return done["restore"]


async def test_a_snapshot_is_restored_over_every_member(lab: MemoryLab) -> None:
    assert (await lab.install("mems", spec("mems")))["status"] == FinishedStatus.SUCCEEDED
    sid = await _snapshot(lab, "mems")
    [stored] = lab.router.streams.objects["bke-etcd-snapshots"].values()
    assert json.dumps(stored[0].headers) and b"\x00\x01\x02\x03" not in stored[1]  # sealed: the clear bytes are not there
    before = {n: a.executed for n, a in lab.agents.items()}
    restore = await _restore(lab, "mems", sid)
    assert restore["status"] == "Succeeded", restore
    assert all(lab.agents[m].executed > before[m] for m in ("master1", "master2", "master3"))


async def test_a_member_that_fails_its_restore_fails_the_restore_naming_it(lab: MemoryLab) -> None:
    assert (await lab.install("memt", spec("memt")))["status"] == FinishedStatus.SUCCEEDED
    sid = await _snapshot(lab, "memt")
    lab.fail(Fault("master3", "restore_etcd_member", times=9))
    restore = await _restore(lab, "memt", sid)
    assert restore["status"] == "Failed", restore
    assert [n["hostname"] for n in restore["failed"]] == ["master3"] or "master3" in restore["message"], restore
