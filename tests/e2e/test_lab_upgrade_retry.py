"""End to end: an upgrade that leaves a node out, completed later with `bke retry --nodes`.

A lab install of the 3-master, 1-worker example; the worker's agent is stopped; `bke upgrade
apply --ignore-check AgentsAlive` upgrades every other node (the worker is reported left out,
its files untouched). The agent is started again and `bke retry NAME --nodes <worker>` (routed to
the upgrader, since the installed cluster's latest operation is that upgrade) completes the
upgrade on it: its files become the new render's, and no other node receives a command. A
retry naming a node that is not behind is refused with what that node runs.

Heartbeats: the agents beat every second and the upgrader calls an agent dead after 4 s
without one (BKE_AGENT_HEARTBEAT_S, BKE_UPGRADER_HEARTBEAT_STALE_S, passed to the lab's
processes through the environment), so the stopped agent counts as not alive within seconds.
"""
from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from datetime import datetime, timezone

import pytest
from redis import Redis

from bke.core.spec.roles import is_master
from bke.core.upgrade.run import is_upgrade_command

from .test_lab_install import SEED, assert_ran_once
from .test_lab_upgrade import CONTAINERD_TO, ETCD_TO, LB_FILES, TO, _bke, _new_render, _spec_copy

pytestmark = pytest.mark.e2e
STALE_S = 4.0


def _by_node(counts: Counter[str]) -> dict[str, set[str]]:
    """Each node's executed upgrade commands (health rounds run beside them all along)."""
    out: dict[str, set[str]] = {}
    for cid in counts:
        if is_upgrade_command(cid):
            out.setdefault(cid.split("/")[2], set()).add(cid)
    return out


async def _heartbeat(r: Redis, cluster: str, node: str, fresh: bool, timeout: float = 60.0) -> None:
    """Poll the dispatcher's heartbeat record until `node`'s last beat is fresh (or stale)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        at = r.hget(f"bke:{cluster}:heartbeat", node)
        age = (datetime.now(timezone.utc) - datetime.fromisoformat(at)).total_seconds() if at else float("inf")
        if (age < 2.0) if fresh else (age > STALE_S + 1.0):
            return
        await asyncio.sleep(0.2)  # polling the record under a deadline
    raise AssertionError(f"{node}'s heartbeat never became {'fresh' if fresh else 'stale'}")


def _files_of(lab, rendered, hostname: str) -> dict[str, tuple[bytes, bytes]]:  # type: ignore[no-untyped-def]
    """path -> (on disk, new render) for every upgraded file of one node."""
    node = next(n for n in rendered.nodes if n.hostname == hostname)
    return {f.path: ((lab.host(hostname) / f.path.lstrip("/")).read_bytes(), f.content)
            for f in node.files if not any(x in f.path for x in LB_FILES)}


async def test_a_left_out_worker_is_upgraded_by_bke_retry_nodes_and_nothing_else_moves(lab_factory, tmp_path,
                                                                                        monkeypatch):
    monkeypatch.setenv("BKE_AGENT_HEARTBEAT_S", "1")
    monkeypatch.setenv("BKE_UPGRADER_HEARTBEAT_STALE_S", str(STALE_S))
    spec = _spec_copy(tmp_path, SEED, "127.0.10.", "127.0.97.")
    lab = lab_factory(str(spec))
    assert await lab.install() == 0, lab.out.getvalue()
    cluster, workdir = lab.plan.cluster, str(lab.workdir)
    [worker] = [n.hostname for n in lab.plan.nodes if not is_master(n.roles)]
    masters = [n.hostname for n in lab.plan.nodes if n.hostname != worker]
    r = Redis.from_url(lab.info.redis_url, decode_responses=True)
    new_plan, rendered = _new_render(lab.plan)
    before = {p: disk for p, (disk, _) in _files_of(lab, rendered, worker).items()}

    assert lab.sup.stop_agent(worker)
    await _heartbeat(r, cluster, worker, fresh=False)
    upgrade = ("--to", TO, "--etcd-version", ETCD_TO, "--containerd-version", CONTAINERD_TO, "--workdir", workdir)
    refused = await asyncio.to_thread(_bke, "upgrade", "apply", cluster, *upgrade)
    assert refused.returncode == 2 and "AgentsAlive" in refused.stderr and worker in refused.stderr, refused.stderr
    done = await asyncio.to_thread(_bke, "upgrade", "apply", cluster, *upgrade, "--ignore-check", "AgentsAlive")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"left out: {worker}" in done.stdout, done.stdout
    # every other node is on the new render; the worker's files are as they were
    for h in masters:
        assert all(disk == new for disk, new in _files_of(lab, rendered, h).values()), h
    assert {p: disk for p, (disk, _) in _files_of(lab, rendered, worker).items()} == before
    assert any(disk != new for disk, new in _files_of(lab, rendered, worker).values())  # it is behind
    nodes = {h: json.loads(v) for h, v in r.hgetall(f"bke:{cluster}:upgrade:nodes").items()}
    assert nodes[worker]["target"]["kubernetes"] == TO and "left out" in nodes[worker]["why"]
    assert all("target" not in nodes[h] and nodes[h]["version"]["kubernetes"] == TO for h in masters)
    first = r.get(f"bke:{cluster}:upgrade")
    assert first is not None and json.loads(first)["status"] == "Succeeded"

    # a node that is not behind is refused, with what it runs; nothing is started
    ahead = await asyncio.to_thread(_bke, "retry", cluster, "--nodes", masters[0], "--workdir", workdir)
    assert ahead.returncode == 2, ahead.stdout + ahead.stderr
    assert f"{masters[0]} runs kubernetes {TO}" in ahead.stderr, ahead.stderr
    assert json.loads(r.get(f"bke:{cluster}:upgrade") or "{}")["request_id"] == json.loads(first)["request_id"]

    lab.sup.ensure_agents(lab.info, lab.plan, only=[worker])
    await _heartbeat(r, cluster, worker, fresh=True)
    ran_before = _by_node(lab.executions())
    retried = await asyncio.to_thread(_bke, "retry", cluster, "--nodes", worker, "--workdir", workdir)
    assert retried.returncode == 0, retried.stdout + retried.stderr
    assert "upgrade Succeeded" in retried.stdout and f"on {worker}" in retried.stdout, retried.stdout

    # the worker's files are now the new render's
    assert all(disk == new for disk, new in _files_of(lab, rendered, worker).values())
    # and only the worker received commands of the retry
    ran_after = _by_node(lab.executions())
    for h in masters:
        assert ran_after.get(h) == ran_before.get(h), h
    retry_rid = json.loads(r.get(f"bke:{cluster}:upgrade") or "{}")["request_id"]
    mine = sorted(c for c in ran_after[worker] - ran_before.get(worker, set()))
    assert mine and all(f"upgrade@{retry_rid}@" in c for c in mine), mine
    assert {c.split("@")[2].split("/")[0] for c in mine} == {"agents", "workers", "post-checks"}
    nodes = {h: json.loads(v) for h, v in r.hgetall(f"bke:{cluster}:upgrade:nodes").items()}
    assert "target" not in nodes[worker] and nodes[worker]["version"]["kubernetes"] == TO
    stored = json.loads(r.get(f"bke:{cluster}:plan") or "{}")
    assert stored["kubernetesVersion"] == f"v{TO}"
    drains = json.loads(r.hget(f"bke:{cluster}:upgrade:drain", worker) or "{}")
    assert drains and drains["cordoned"] <= drains["drained"] <= drains["uncordoned"]
    assert_ran_once(lab)
