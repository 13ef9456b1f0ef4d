"""etcd disaster recovery's pure parts: the restore plan and its node steps, the run's decisions
(stages in order, a failed node stops it, a silent node fails after the deadline, resumable
record), the snapshot's delivery re-sealed to one agent, and the agent's bus permission for it."""
from __future__ import annotations

import asyncio
import hashlib
import io
import os
from pathlib import Path

import pytest

from bke.adapters.auth.permissions import agent_permissions
from bke.contracts.agent import AgentCommand
from bke.contracts.agent_steps import PARKED_DIR, ParkStaticPod, RestoreEtcdMember, WaitHealth
from bke.contracts.restore import restore_piece_subject
from bke.adapters.etcdsnap.delivery import DeliveryError, Feed, open_received, receive_frames, resealed_frames
from bke.core.etcdsnap.restore import STAGES, node_steps, restore_plan
from bke.core.etcdsnap.restore_run import (
    RestoreRun, awaited_ids, decide, fold_results, is_restore_command, mark_local, mark_sent, new_run,
    restore_command_id,
)
from bke.core.etcdsnap.sealed_stream import seal_stream
from bke.core.secrets.sealing import SealedDataError, generate_agent_key, open_sealed
from bke.core.secrets.snapshot_key import SnapshotKey
from bke.core.state.schema import StoredVersionTooNew

from ..upgrade_helpers import SEED, SPLIT, plan_of

SID = "20261201t093005z-pods1"
SHA = "ab" * 32


# --- the plan ---------------------------------------------------------------------------------------
def test_restore_plan_stops_every_apiserver_and_member_in_the_stage_order() -> None:
    plan = plan_of(SPLIT)
    rp = restore_plan(plan, "etcd-pods", SID)
    assert rp.apiservers == ("m1", "m2", "m3") and rp.members == ("pods1", "pods2", "pods3")
    assert rp.stops() == ["kube-apiserver on m1", "kube-apiserver on m2", "kube-apiserver on m3",
                          "etcd-pods member on pods1", "etcd-pods member on pods2", "etcd-pods member on pods3"]
    assert [s.name for s in STAGES] == ["verify-snapshot", "stop-apiservers", "stop-members", "restore-members",
                                        "start-members", "start-apiservers"]
    assert [rp.nodes(s) for s in STAGES] == [(), rp.apiservers, rp.members, rp.members, rp.members, rp.apiservers]
    assert rp.aside_dir == f"/var/lib/etcd-pods.before-restore-{SID}" and rp.token == f"{plan.cluster}-etcd-pods-{SID}"
    with pytest.raises(KeyError, match="has no etcd cluster 'etcd-x'"):
        restore_plan(plan, "etcd-x", SID)


def test_node_steps_park_restore_and_start_with_the_members_values() -> None:
    plan = plan_of(SPLIT)
    rp = restore_plan(plan, "etcd-pods", SID)
    ec = plan.etcd_cluster("etcd-pods")
    assert ec is not None

    def steps(stage: str, host: str) -> list:
        return node_steps(plan, rp, stage, host, restore_id="r1", sha256=SHA, size=1056, timeout_s=60)

    (park_api,) = steps("stop-apiservers", "m1")
    assert isinstance(park_api, ParkStaticPod) and park_api.parked
    assert park_api.manifest == "/etc/kubernetes/manifests/kube-apiserver.yaml"
    assert park_api.port_url == "https://127.0.0.1:6443/livez"
    (park_etcd,) = steps("stop-members", "pods2")
    assert park_etcd.manifest == "/etc/kubernetes/manifests/etcd-pods.yaml"
    assert park_etcd.port_url == f"http://127.0.0.1:{ec.metrics_port}/health"
    (restore,) = steps("restore-members", "pods2")
    assert isinstance(restore, RestoreEtcdMember)
    member = ec.member("pods2")
    assert member is not None
    assert (restore.member, restore.initial_cluster, restore.token, restore.peer_url, restore.data_dir,
            restore.aside_dir, restore.sha256, restore.size) == (
        "pods2", ec.initial_cluster, rp.token, member.peer_url, "/var/lib/etcd-pods", rp.aside_dir, SHA, 1056)
    unpark, health = steps("start-members", "pods3")
    assert isinstance(unpark, ParkStaticPod) and not unpark.parked
    assert isinstance(health, WaitHealth) and health.expect_body == '"health":"true"'
    unpark, health = steps("start-apiservers", "m2")
    assert unpark.manifest.endswith("kube-apiserver.yaml") and health.url.endswith("/livez")
    # every step is a valid signed-command step (the command model takes them)
    AgentCommand(command_id="c/restore@r1@restore-members/pods2/0", cluster="c", node="pods2", phase="p",
                 issued_at="t", steps=steps("restore-members", "pods2"))
    with pytest.raises(KeyError, match="m1 is no member of etcd-pods"):
        steps("restore-members", "m1")
    with pytest.raises(KeyError, match="sends no agent steps"):
        steps("verify-snapshot", "m1")


# --- the run ----------------------------------------------------------------------------------------
def _run() -> RestoreRun:
    return new_run("r1", restore_plan(plan_of(SEED), "etcd-data", "s1"), SHA, 1056, "2026-12-01T09:00:00+00:00")


def _answer(run: RestoreRun, stage: str, host: str, status: str = "Succeeded", step: str = "",
            stderr: str = "") -> tuple[str, dict[str, str]]:
    return restore_command_id(run.cluster, run.restore_id, stage, host), {"status": status, "step": step,
                                                                         "stderr": stderr}


def test_run_goes_stage_by_stage_waiting_for_every_node() -> None:
    run = _run()
    masters = ("master1", "master2", "master3")
    d = decide(run)
    assert d.action == "local" and d.stage is not None and d.stage.name == "verify-snapshot"
    mark_local(d.stage, True, run)
    for stage in ("stop-apiservers", "stop-members", "restore-members", "start-members", "start-apiservers"):
        d = decide(run)
        assert (d.action, d.stage.name if d.stage else "", d.hosts) == ("send", stage, masters)
        mark_sent(d.stage, 100.0)
        assert decide(run).action == "wait"
        ids = awaited_ids(run)
        assert ids == [restore_command_id(run.cluster, "r1", stage, h) for h in masters]
        assert all(is_restore_command(i) for i in ids)
        assert fold_results(run, dict([_answer(run, stage, "master1")]), 101.0, 1800.0)
        assert decide(run).action == "wait"  # two members still running: no stage moves on alone
        assert awaited_ids(run) == ids[1:]
        fold_results(run, dict(_answer(run, stage, h) for h in masters), 102.0, 1800.0)
    assert decide(run).action == "succeed"
    again = RestoreRun.from_json(run.to_json())  # what a restarted upgrader reads
    assert again == run


def test_a_failed_node_fails_the_run_naming_it_and_nothing_further_is_sent() -> None:
    run = _run()
    mark_local(run.stages[0], True, run)
    d = decide(run)
    assert d.stage is not None
    mark_sent(d.stage, 100.0)
    answers = dict([_answer(run, "stop-apiservers", "master1"),
                    _answer(run, "stop-apiservers", "master2", "Failed", "park:kube-apiserver", "port still open")])
    fold_results(run, answers, 101.0, 1800.0)
    assert decide(run).action == "wait"  # master3 is still waited for
    fold_results(run, {**answers, **dict([_answer(run, "stop-apiservers", "master3")])}, 102.0, 1800.0)
    d = decide(run)
    assert d.action == "fail"
    assert d.reason == "stop-apiservers failed on master2 (agent step park:kube-apiserver): port still open"


def test_a_silent_node_fails_its_stage_after_the_deadline_and_a_bad_snapshot_stops_nothing() -> None:
    run = _run()
    mark_local(run.stages[0], True, run)
    d = decide(run)
    assert d.stage is not None
    mark_sent(d.stage, 100.0)
    assert not fold_results(run, {}, 200.0, 1800.0)
    assert fold_results(run, {}, 2000.0, 1800.0)
    assert decide(run).reason.startswith("stop-apiservers failed on master1: no answer 1800s after")

    bad = _run()
    mark_local(bad.stages[0], False, bad, "snapshot s1: its bytes do not match its recorded sha256")
    d = decide(bad)
    assert d.action == "fail" and d.reason == "verify-snapshot failed: snapshot s1: its bytes do not match its recorded sha256"
    assert all(s.status == "Pending" for s in bad.stages[1:])


def test_a_record_from_a_newer_bke_is_refused() -> None:
    raw = _run().to_json().replace('"schema_version":1', '"schema_version":2')
    with pytest.raises(StoredVersionTooNew, match="etcd restore record"):
        RestoreRun.from_json(raw)


# --- delivery -------------------------------------------------------------------------------------
def _snapshot(n: int = 5000) -> bytes:
    """Bytes shaped like an etcd snapshot: a database of 512-byte pages and etcd's sha256 of it."""
    db = os.urandom(512 * (n // 512 + 1))
    return db + hashlib.sha256(db).digest()


def _stored(tmp_path: Path, data: bytes, key: SnapshotKey) -> Path:
    path = tmp_path / "stored.sealed"
    path.write_bytes(b"".join(seal_stream(io.BytesIO(data).read, key.public, 1000)))
    return path


def test_delivery_reseals_to_the_agent_and_the_agent_gets_the_exact_snapshot(tmp_path: Path) -> None:
    key, agent = SnapshotKey.generate(), generate_agent_key()
    data = _snapshot()
    stored = _stored(tmp_path, data, key)
    feed = Feed(lambda: resealed_frames(stored, key.open, agent.public_key(), piece=700))
    first, last = feed.frame(0)
    assert not last and feed.frame(0) == (first, last)  # a retried request: the same frame
    with pytest.raises(SealedDataError):
        key.open(first[4:])  # sealed to the agent, not to the snapshot key
    asked: list[int] = []

    async def ask(i: int) -> tuple[bytes, bool]:
        asked.append(i)
        return feed.frame(i)  # index 0 again after frame 0: the feed starts over

    count = asyncio.run(receive_frames(ask, tmp_path / "got.sealed"))
    assert count == -(-len(data) // 700) and asked == list(range(count))
    size = open_received(tmp_path / "got.sealed", lambda b: open_sealed(agent, b), tmp_path / "clear.db",
                         hashlib.sha256(data).hexdigest())
    assert size == len(data) and (tmp_path / "clear.db").read_bytes() == data
    assert (tmp_path / "clear.db").stat().st_mode & 0o777 == 0o600
    with pytest.raises(DeliveryError, match="no piece"):
        feed.frame(count)


def test_the_agent_refuses_bytes_that_are_not_the_signed_sha256(tmp_path: Path) -> None:
    key, agent = SnapshotKey.generate(), generate_agent_key()
    stored = _stored(tmp_path, _snapshot(), key)
    feed = Feed(lambda: resealed_frames(stored, key.open, agent.public_key()))

    async def ask(i: int) -> tuple[bytes, bool]:
        return feed.frame(i)

    asyncio.run(receive_frames(ask, tmp_path / "got.sealed"))
    with pytest.raises(DeliveryError, match="is not the"):
        open_received(tmp_path / "got.sealed", lambda b: open_sealed(agent, b), tmp_path / "clear.db", SHA)
    assert not (tmp_path / "clear.db").exists()


def test_an_agent_may_ask_for_its_own_nodes_pieces_only() -> None:
    perms = agent_permissions("c1", "n1.example")
    pieces = [s for s in perms.pub_allow if "etcd-restore" in s]
    assert pieces == [restore_piece_subject("c1", "n1_example")]
    assert PARKED_DIR.startswith("/etc/kubernetes/")  # inside what the host backend may write


# --- the CLI ----------------------------------------------------------------------------------------
def test_the_cli_refuses_a_malformed_snapshot_id_naming_its_flag_before_any_bus(capsys) -> None:  # type: ignore[no-untyped-def]
    from bke_cli.main import main as bke

    # port 1: nothing listens there, so reaching the bus would be a different error
    assert bke(["etcd", "restore", "c1", "--etcd-cluster", "etcd-data", "--snapshot", "Bad Id",
                "--nats", "nats://127.0.0.1:1"]) == 2
    assert "ERROR --snapshot: String should match pattern" in capsys.readouterr().err
