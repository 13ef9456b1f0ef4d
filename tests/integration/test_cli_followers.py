"""Every CLI follower against a scripted service on real NATS: what each prints, in which order,
and the exit code it ends with (accepted, refused, failed, no answer, a run that does not end).

The service stand-in listens on the request subject and answers with the events a real one
publishes, with the request's id filled in; the follower cannot tell the difference.
"""
from __future__ import annotations

import asyncio
import io
import json
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
import typer
from rich.console import Console

from bke.contracts import CLUSTER_REJECTED, INSTALL_CLUSTER
from bke.contracts.apply import APPLY_ACCEPTED, APPLY_CLUSTER, APPLY_REJECTED
from bke.contracts.certs import CERTS_FAILED, CERTS_RENEWED, RENEW_CERTS
from bke.contracts.membership import (
    JOIN_NODES, JOIN_NODES_FINISHED, REMOVE_NODES, REMOVE_NODES_FINISHED, JoinNodes, RemoveNodes,
    join_changed_subject, remove_changed_subject,
)
from bke.contracts.reset import (
    DELETE_OWNERS, RESET_ACCEPTED, RESET_CLUSTER, RESET_REJECTED, removed_subject, reset_subject,
)
from bke.contracts.restore import RESTORE_ACCEPTED, RESTORE_ETCD, RESTORE_REJECTED, RestoreEtcd, restore_subject
from bke.contracts.rotation import rotation_subject
from bke.contracts.upgrade import UPGRADE_ACCEPTED, UPGRADE_CLUSTER, UPGRADE_REJECTED, UpgradeCluster, upgrade_subject
from bke_cli import reset_cmd
from bke_cli.apply_follow import apply_and_follow
from bke_cli.etcd_restore_follow import restore_and_follow
from bke_cli.install_follow import submit_and_follow
from bke_cli.membership_cmd import follow_membership
from bke_cli.rotate_follow import renew_and_follow
from bke_cli.upgrade_follow import upgrade_and_follow

pytestmark = pytest.mark.integration
Script = Callable[[str], list[tuple[str, dict[str, Any]]]]  # request id -> (subject, event) in order


@asynccontextmanager
async def service(nats_client, subject: str, script: Script) -> AsyncIterator[None]:
    """Answer every request on `subject` with the script's events, published in order."""

    async def answer(msg: Any) -> None:
        for to, event in script(json.loads(msg.data)["requestId"]):
            await nats_client.publish(to, json.dumps(event).encode())

    sub = await nats_client.subscribe(subject, cb=answer)
    await nats_client.flush()
    try:
        yield
    finally:
        await sub.unsubscribe()


def _name() -> str:
    return f"f{uuid.uuid4().hex[:8]}"


async def test_an_install_refused_prints_every_error_and_exits_2(nats_client, nats_url, capsys):
    errors = [{"path": "spec.nodes", "message": "at least one"}, {"path": "spec.name", "message": "bad"}]
    refused: Script = lambda rid: [(CLUSTER_REJECTED, {"requestId": "other", "errors": []}),  # noqa: E731
                                   (CLUSTER_REJECTED, {"requestId": rid, "errors": errors})]
    async with service(nats_client, INSTALL_CLUSTER, refused):
        assert await submit_and_follow(nats_url, b"name: x\n", _name(), 20.0, Console(file=io.StringIO())) == 2
    assert capsys.readouterr().err == "ERROR spec.nodes: at least one\nERROR spec.name: bad\n"


def _upgrade_view(rid: str, status: str, done: int, message: str = "") -> dict[str, Any]:
    steps = [{"name": "pre-checks", "status": "Succeeded", "done": 1, "total": 1},
             {"name": "workers", "group": "g1", "status": status if status != "Succeeded" else "Succeeded",
              "done": done, "total": 2}]
    return {"requestId": rid, "status": status, "step": "workers", "steps": steps, "message": message}


def _upgrade_accepted(cluster: str, rid: str) -> dict[str, Any]:
    versions = {"kubernetes": "1.30.1", "etcd": "3.5.12", "containerd": "1.7.13"}
    return {"requestId": rid, "cluster": cluster, "current": versions,
            "target": {**versions, "kubernetes": "1.31.0"},
            "steps": [{"name": "workers", "group": "g1", "total": 2, "batches": 1}, {"name": "post", "batches": 0}],
            "findings": [{"name": "skew", "kind": "skippable", "message": "[x] a warning", "ignored": True}]}


async def test_an_upgrade_prints_its_plan_then_each_changed_step_once_and_exits_0(nats_client, nats_url, capsys):
    cluster, out = _name(), io.StringIO()
    changed = upgrade_subject(cluster)
    script: Script = lambda rid: [  # noqa: E731
        (UPGRADE_ACCEPTED, {"requestId": "someone-else"}), (UPGRADE_ACCEPTED, _upgrade_accepted(cluster, rid)),
        (changed, {"upgrade": _upgrade_view(rid, "Running", 0)}), (changed, {"upgrade": _upgrade_view(rid, "Running", 0)}),
        (changed, {"upgrade": _upgrade_view("other", "Failed", 0)}),
        (changed, {"upgrade": _upgrade_view(rid, "Running", 1)}), (changed, {"upgrade": _upgrade_view(rid, "Succeeded", 2)})]
    req = UpgradeCluster(request_id="u1", cluster=cluster, kubernetes_version="1.31.0")
    async with service(nats_client, UPGRADE_CLUSTER, script):
        assert await upgrade_and_follow(nats_url, req, 20.0, Console(file=out, width=300)) == 0
    assert out.getvalue().splitlines() == [
        f"{cluster}: kubernetes 1.30.1 -> 1.31.0, etcd 3.5.12 -> 3.5.12, containerd 1.7.13 -> 1.7.13",
        "  workers/g1: 2 node(s) in 1 batch(es)", "  post",
        "  [skew] skippable (ignored): [x] a warning",
        "upgrade Running: step 1/2, workers/g1 0/2 nodes", "upgrade Running: step 1/2, workers/g1 1/2 nodes",
        "upgrade Succeeded: step 2/2"]
    assert capsys.readouterr().err == ""


async def test_an_upgrade_refused_exits_2_and_one_that_fails_exits_1(nats_client, nats_url, capsys):
    cluster = _name()
    refused: Script = lambda rid: [(UPGRADE_REJECTED, {"requestId": rid, "message": "skew too large"})]  # noqa: E731
    async with service(nats_client, UPGRADE_CLUSTER, refused):
        req = UpgradeCluster(request_id="u2", cluster=cluster, kubernetes_version="1.31.0")
        assert await upgrade_and_follow(nats_url, req, 20.0, Console(file=io.StringIO())) == 2
    assert capsys.readouterr().err == f"ERROR upgrade of {cluster} refused: skew too large\n"
    failed: Script = lambda rid: [  # noqa: E731
        (UPGRADE_ACCEPTED, _upgrade_accepted(cluster, rid)),
        (upgrade_subject(cluster), {"upgrade": _upgrade_view(rid, "Failed", 1, "m1 rolled back")})]
    out = io.StringIO()
    async with service(nats_client, UPGRADE_CLUSTER, failed):
        req = UpgradeCluster(request_id="u3", cluster=cluster, kubernetes_version="1.31.0")
        assert await upgrade_and_follow(nats_url, req, 20.0, Console(file=out, width=300)) == 1
    assert out.getvalue().splitlines()[-1] == "upgrade Failed: step 1/2, workers/g1 1/2 nodes"
    assert capsys.readouterr().err == f"ERROR upgrade of {cluster} failed: m1 rolled back\n"


async def test_a_dry_run_upgrade_ends_at_its_plan_and_no_answer_ends_at_the_deadline(nats_client, nats_url, capsys):
    cluster, out = _name(), io.StringIO()
    plan: Script = lambda rid: [(UPGRADE_ACCEPTED, _upgrade_accepted(cluster, rid))]  # noqa: E731
    async with service(nats_client, UPGRADE_CLUSTER, plan):
        req = UpgradeCluster(request_id="u4", cluster=cluster, kubernetes_version="1.31.0", dry_run=True)
        assert await upgrade_and_follow(nats_url, req, 20.0, Console(file=out, width=300)) == 0
    assert len(out.getvalue().splitlines()) == 4
    req = UpgradeCluster(request_id="u5", cluster=cluster, kubernetes_version="1.31.0")
    assert await upgrade_and_follow(nats_url, req, 0.5, Console(file=io.StringIO())) == 1
    assert capsys.readouterr().err == (
        f"ERROR no answer from the upgrader within 0s (cluster {cluster}, request u5); "
        f"`bke upgrade status {cluster}` shows where it is\n")
    started: Script = lambda rid: [(UPGRADE_ACCEPTED, _upgrade_accepted(cluster, rid))]  # noqa: E731
    async with service(nats_client, UPGRADE_CLUSTER, started):
        req = UpgradeCluster(request_id="u6", cluster=cluster, kubernetes_version="1.31.0")
        assert await upgrade_and_follow(nats_url, req, 3.0, Console(file=io.StringIO())) == 1
    assert capsys.readouterr().err.startswith(f"ERROR the upgrade did not finish within 3s (cluster {cluster}, request u6)")


async def test_apply_prints_its_steps_and_its_refusals_by_rule(nats_client, nats_url, capsys):
    cluster, out = _name(), io.StringIO()
    steps = [{"name": "pre-checks", "batches": 0}, {"name": "workers", "total": 3, "batches": 2}]

    def accepted(rid: str) -> list[tuple[str, dict[str, Any]]]:
        view = {"requestId": rid, "status": "Succeeded", "steps": [{"name": "workers", "status": "Succeeded", "done": 3, "total": 3}]}
        return [(APPLY_ACCEPTED, {"requestId": rid, "cluster": cluster, "actions": [1, 2], "steps": steps}),
                (upgrade_subject(cluster), {"upgrade": view})]

    async with service(nats_client, APPLY_CLUSTER, accepted):
        assert await apply_and_follow(nats_url, b"cluster: {}\n", cluster, 20.0, Console(file=out, width=300)) == 0
    assert out.getvalue().splitlines() == [
        f"{cluster}: the changed spec is accepted: 2 action(s) in 1 step(s)", "  workers: 3 node(s) in 2 batch(es)",
        "apply Succeeded: step 1/1"]
    refusals = [{"path": "spec.nodes[0]", "message": "cannot change"}]
    refused: Script = lambda rid: [(APPLY_REJECTED, {"requestId": rid, "cluster": cluster, "refusals": refusals})]  # noqa: E731
    async with service(nats_client, APPLY_CLUSTER, refused):
        assert await apply_and_follow(nats_url, b"cluster: {}\n", cluster, 20.0, Console(file=io.StringIO())) == 2
    assert capsys.readouterr().err == f"ERROR apply to {cluster} refused:\nERROR   spec.nodes[0]: cannot change\n"
    nothing: Script = lambda rid: [(APPLY_ACCEPTED, {"requestId": rid, "cluster": cluster, "steps": []})]  # noqa: E731
    async with service(nats_client, APPLY_CLUSTER, nothing):
        assert await apply_and_follow(nats_url, b"cluster: {}\n", cluster, 20.0, Console(file=io.StringIO())) == 0


def _restore_view(rid: str, status: str, stage: str, done: int, message: str = "") -> dict[str, Any]:
    stages = [{"name": "stop", "status": "Succeeded", "nodes": ["m1"], "done": 1},
              {"name": "restore", "status": status if stage == "restore" else "Pending", "nodes": ["m1", "m2"], "done": done}]
    return {"requestId": rid, "status": status, "stage": stage, "stages": stages, "message": message}


async def test_etcd_restore_dry_run_prints_what_stops_and_a_run_follows_its_stages(nats_client, nats_url, capsys):
    cluster = _name()
    accepted = {"etcdCluster": "main", "cluster": cluster, "snapshotId": "s1", "revision": 7, "takenAt": "t0",
                "stops": ["kube-apiserver on m1"], "token": "tok", "stages": [{"name": "stop", "nodes": ["m1"], "summary": "stop"},
                                                                          {"name": "finish", "summary": "start"}]}
    changed = restore_subject(cluster)
    script: Script = lambda rid: [(RESTORE_ACCEPTED, {**accepted, "requestId": rid}),  # noqa: E731
                                  (changed, {"restore": _restore_view(rid, "Running", "restore", 0)}),
                                  (changed, {"restore": _restore_view(rid, "Running", "restore", 0)}),
                                  (changed, {"restore": _restore_view(rid, "Succeeded", "restore", 2)})]
    said: list[str] = []
    req = RestoreEtcd(request_id="r1", cluster=cluster, etcd_cluster="main", snapshot_id="s1", dry_run=True)
    async with service(nats_client, RESTORE_ETCD, script):
        assert await restore_and_follow(nats_url, req, 20.0, said.append) == 0
        assert said == [f"Restoring main of {cluster} from snapshot s1 (revision 7, taken t0) stops:",
                        "  kube-apiserver on m1",
                        "then restores every member as a new cluster (token tok) and starts what it stopped:",
                        "  1. stop [m1]: stop", "  2. finish [the upgrader]: start"]
        said.clear()
        run = req.model_copy(update={"dry_run": False, "request_id": "r1-run"})
        assert await restore_and_follow(nats_url, run, 20.0, said.append) == 0
    assert said == ["etcd restore Running: stage 1/2, restore 0/2 nodes", "etcd restore Succeeded: stage 2/2, restore 2/2 nodes"]
    assert capsys.readouterr().err == ""


async def test_etcd_restore_refused_exits_2_failed_exits_1_and_silence_ends_at_the_deadline(nats_client, nats_url, capsys):
    cluster = _name()
    req = RestoreEtcd(request_id="r2", cluster=cluster, etcd_cluster="main", snapshot_id="s1")
    refused: Script = lambda rid: [(RESTORE_REJECTED, {"requestId": rid, "message": "no such snapshot"})]  # noqa: E731
    async with service(nats_client, RESTORE_ETCD, refused):
        assert await restore_and_follow(nats_url, req, 20.0, print) == 2
    assert capsys.readouterr().err == f"ERROR etcd restore of {cluster} refused: no such snapshot\n"
    failed: Script = lambda rid: [  # noqa: E731
        (RESTORE_ACCEPTED, {"requestId": rid}),
        (restore_subject(cluster), {"restore": _restore_view(rid, "Failed", "restore", 1, "m2 did not start")})]
    async with service(nats_client, RESTORE_ETCD, failed):
        assert await restore_and_follow(nats_url, req.model_copy(update={"request_id": "r3"}), 20.0, lambda line: None) == 1
    assert capsys.readouterr().err == (
        f"ERROR etcd restore of {cluster} failed: m2 did not start\nERROR what it stopped stays stopped (old data dirs "
        "are kept aside); the same command runs it again after a fix\n")
    assert await restore_and_follow(nats_url, req.model_copy(update={"request_id": "r4"}), 0.5, print) == 1
    assert capsys.readouterr().err == f"ERROR no answer from the upgrader within 0s (cluster {cluster}, request r4)\n"


def _rotation(rid: str, status: str, done: int, running: list[str]) -> dict[str, Any]:
    nodes = [{"hostname": h, "status": "Running"} for h in running] + [{"hostname": "m9", "status": "Succeeded"}]
    return {"rotation": {"requestId": rid, "status": status, "done": done, "total": 3, "nodes": nodes, "message": "m2 down"}}


async def test_a_renewal_prints_the_certificates_then_the_rotation_to_its_end(nats_client, nats_url, capsys):
    cluster, out = _name(), io.StringIO()
    cert = {"instance": "apiserver@m1", "serial": "0a", "notAfter": "2030-01-01", "nodes": ["m1", "m2"]}
    changed = rotation_subject(cluster)
    script: Script = lambda rid: [(CERTS_RENEWED, {"requestId": rid, "certificates": [cert]}),  # noqa: E731
                                  (changed, {"rotation": None}), (changed, _rotation(rid, "Running", 1, ["m1"])),
                                  (changed, _rotation(rid, "Running", 1, ["m1"])), (changed, _rotation(rid, "Succeeded", 3, []))]
    async with service(nats_client, RENEW_CERTS, script):
        assert await renew_and_follow(nats_url, cluster, ["apiserver"], None, 20.0, Console(file=out, width=300)) == 0
    assert out.getvalue().splitlines() == ["renewed apiserver@m1 (serial 0a, expires 2030-01-01) for m1, m2",
                                           "rotation Running: 1/3 nodes, now m1", "rotation Succeeded: 3/3 nodes"]
    failed: Script = lambda rid: [(CERTS_RENEWED, {"requestId": rid, "certificates": [cert]}),  # noqa: E731
                                  (changed, _rotation(rid, "Failed", 1, []))]
    async with service(nats_client, RENEW_CERTS, failed):
        assert await renew_and_follow(nats_url, cluster, [], 30.0, 20.0, Console(file=io.StringIO())) == 1
    assert capsys.readouterr().err == f"ERROR rotation in {cluster} failed: m2 down\n"


async def test_a_renewal_refused_exits_1_nothing_to_renew_exits_0_and_a_stuck_rotation_ends_at_the_deadline(
        nats_client, nats_url, capsys):
    cluster, out = _name(), io.StringIO()
    refused: Script = lambda rid: [(CERTS_FAILED, {"requestId": rid, "reason": "no PKI"})]  # noqa: E731
    async with service(nats_client, RENEW_CERTS, refused):
        assert await renew_and_follow(nats_url, cluster, ["x"], None, 20.0, Console(file=out)) == 1
    assert capsys.readouterr().err == f"ERROR renewal in {cluster} refused: no PKI\n"
    nothing: Script = lambda rid: [(CERTS_RENEWED, {"requestId": rid, "certificates": []})]  # noqa: E731
    async with service(nats_client, RENEW_CERTS, nothing):
        assert await renew_and_follow(nats_url, cluster, ["x"], None, 20.0, Console(file=out)) == 0
    assert out.getvalue() == f"{cluster}: no certificate matched; nothing renewed\n"
    stuck: Script = lambda rid: [(CERTS_RENEWED, {"requestId": rid, "certificates": [{  # noqa: E731
        "instance": "a", "serial": "1", "notAfter": "n", "nodes": ["m1"]}]})]
    async with service(nats_client, RENEW_CERTS, stuck):
        assert await renew_and_follow(nats_url, cluster, ["a"], None, 3.0, Console(file=io.StringIO())) == 1
    assert capsys.readouterr().err.startswith(f"ERROR the rotation did not finish within 3s (cluster {cluster}, request ")


def _members(rid: str, key: str, stage: str, waiting: str = "") -> dict[str, Any]:
    return {key: {"requestId": rid, "nodes": [{"hostname": "w1", "stage": stage, "status": "Running"}], "waiting": waiting}}


async def test_join_and_removal_print_every_change_and_answer_the_finished_event(nats_client, nats_url):
    cluster = _name()
    finished = {"status": "Succeeded", "nodes": [{"hostname": "w1", "status": "Succeeded"}]}
    join = join_changed_subject(cluster)
    script: Script = lambda rid: [(join, _members(rid, "join", "agent")), (join, _members(rid, "join", "agent")),  # noqa: E731
                                  (join, _members(rid, "join", "kubelet", "w1's agent")),
                                  (JOIN_NODES_FINISHED, {**finished, "requestId": rid})]
    said: list[str] = []
    req = JoinNodes(request_id="j1", cluster=cluster, plan_digest="0" * 64, nodes=["w1"])
    async with service(nats_client, JOIN_NODES, script):
        assert await follow_membership(nats_url, req, 20.0, said.append) == {**finished, "requestId": "j1"}
    # the changes in the order sent, each once; the finished answer comes on a subscription of its
    # own, which nats-py serves in a task of its own, so it may overtake the last changes (seen in CI)
    sent = ["  w1 agent Running", "  w1 agent Running", "  w1 kubelet Running; w1's agent"]
    assert said == sent[:len(said)], said
    gone = {"status": "Failed", "reason": "w1 did not drain", "kind": "operational"}
    removal: Script = lambda rid: [(remove_changed_subject(cluster), _members(rid, "removal", "drain")),  # noqa: E731
                                   (REMOVE_NODES_FINISHED, {**gone, "requestId": rid})]
    said.clear()
    async with service(nats_client, REMOVE_NODES, removal):
        req2 = RemoveNodes(request_id="j2", cluster=cluster, nodes=["w1"])
        assert await follow_membership(nats_url, req2, 20.0, said.append) == {**gone, "requestId": "j2"}
    assert said in ([], ["  w1 drain Running"])  # as above: the answer may overtake the change
    assert await follow_membership(nats_url, RemoveNodes(request_id="j3", cluster=cluster, nodes=["w1"]), 0.5) == {}


def _reset_view(rid: str, status: str, done: int) -> dict[str, Any]:
    return {"reset": {"requestId": rid, "status": status, "done": done, "total": 2, "message": "m1 unreachable",
                      "snapshots": [{"etcdCluster": "main", "status": "Succeeded"}]}}


async def _reset(nats_url: str, cluster: str, delete: bool, timeout: float = 20.0) -> int:
    """`bke reset` / `bke delete` as the command runs them (their own event loop, in a thread)."""
    try:
        await asyncio.to_thread(reset_cmd._run, cluster, [] if delete else ["m1"], delete, True, timeout, None, nats_url)
    except SystemExit as exc:  # die()
        return int(exc.code or 0)
    except typer.Exit as exc:
        return exc.exit_code
    return 0


async def test_reset_prints_its_start_and_every_change_and_delete_waits_for_every_owner(nats_client, nats_url, capsys):
    cluster = _name()
    changed, removed = reset_subject(cluster), removed_subject(cluster)
    script: Script = lambda rid: [  # noqa: E731
        (RESET_ACCEPTED, {"requestId": rid, "nodes": ["m1", "m2"]}), (changed, _reset_view(rid, "Running", 1)),
        (changed, _reset_view(rid, "Running", 1)), (changed, _reset_view(rid, "Succeeded", 2)),
        *[(removed, {"requestId": rid, "service": s, "keys": 2}) for s in DELETE_OWNERS]]
    async with service(nats_client, RESET_CLUSTER, script):
        assert await _reset(nats_url, cluster, delete=False) == 0
        out = capsys.readouterr().out.splitlines()
        assert out == [f"reset of {cluster} started: m1, m2", "  snapshots: main Succeeded; nodes 1/2 Running",
                       "  snapshots: main Succeeded; nodes 1/2 Running", "  snapshots: main Succeeded; nodes 2/2 Succeeded",
                       f"reset m1 of {cluster}: done"]
        assert await _reset(nats_url, cluster, delete=True) == 1  # no --redis: the identities are not revoked
    res = capsys.readouterr()
    assert res.out.splitlines()[-1] == f"records of {cluster} removed by {', '.join(DELETE_OWNERS)} (10 keys)"
    assert res.err.startswith(f"ERROR the bus identities of {cluster}'s agents are not revoked")


async def test_reset_refused_failed_unanswered_and_a_silent_owner(nats_client, nats_url, capsys, monkeypatch):
    cluster = _name()
    monkeypatch.setattr(reset_cmd, "ANSWER_TIMEOUT_S", 3.0)
    refused: Script = lambda rid: [(RESET_REJECTED, {"requestId": rid, "message": "an upgrade runs"})]  # noqa: E731
    async with service(nats_client, RESET_CLUSTER, refused):
        assert await _reset(nats_url, cluster, delete=False) == 2
    assert capsys.readouterr().err == "ERROR refused: an upgrade runs\n"
    failed: Script = lambda rid: [(RESET_ACCEPTED, {"requestId": rid, "nodes": ["m1"]}),  # noqa: E731
                                  (reset_subject(cluster), _reset_view(rid, "Failed", 1))]
    async with service(nats_client, RESET_CLUSTER, failed):
        assert await _reset(nats_url, cluster, delete=True) == 1
    assert capsys.readouterr().err == f"ERROR delete cluster {cluster} failed: m1 unreachable\n"
    assert await _reset(nats_url, cluster, delete=False) == 1  # nobody answers
    assert capsys.readouterr().err == f"ERROR the dispatcher did not answer within {reset_cmd.ANSWER_TIMEOUT_S:.0f}s (is it running?)\n"
    silent: Script = lambda rid: [(RESET_ACCEPTED, {"requestId": rid, "nodes": ["m1"]}),  # noqa: E731
                                  (reset_subject(cluster), _reset_view(rid, "Succeeded", 2)),
                                  (removed_subject(cluster), {"requestId": rid, "service": "planner", "keys": 1})]
    async with service(nats_client, RESET_CLUSTER, silent):
        assert await _reset(nats_url, cluster, delete=True) == 1
    assert capsys.readouterr().err.startswith(
        f"ERROR every node is reset, but certs, renderer, dispatcher, upgrader did not say it removed its records of {cluster}")
    running: Script = lambda rid: [(RESET_ACCEPTED, {"requestId": rid, "nodes": ["m1"]}),  # noqa: E731
                                   (reset_subject(cluster), _reset_view(rid, "Running", 1))]
    async with service(nats_client, RESET_CLUSTER, running):
        assert await _reset(nats_url, cluster, delete=False, timeout=3.0) == 1
    assert capsys.readouterr().err == (
        f"ERROR reset m1 of {cluster}: still Running after 3s; follow it with `bke status {cluster}`\n")
