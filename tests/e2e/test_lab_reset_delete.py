"""End to end: reset one node of an installed lab cluster, then delete the cluster. Real
NATS, Redis and etcd; every service and agent its own process; the CLI as a user runs it.

Reset of node1: that node's files BKE wrote are gone, the other nodes untouched, and no command
reached another node but the etcd snapshot's (the periodic health checks aside). Delete: no
file BKE wrote under any node root, no etcd or kubelet stand-in process of the cluster, no
`bke:seed:*` Redis key, the agents' identities revoked (a connection with one is refused), and
the snapshots still listed by `bke etcd snapshots`."""
from __future__ import annotations

import json
import re
from pathlib import Path

import nats
import pytest
import redis

from bke.adapters.auth.permissions import identity_name
from bke.adapters.bus.connect import BusAccess, connect_nats
from bke.lab.identities import creds_path
from bke.adapters.runtime.processes import pid_alive
from bke_agent.lablayout import LabLayout
from bke_agent.reset import RESET_TABLE
from bke_dispatcher.command_ids import parse_command_id

from .membership_helpers import bke_cli

pytestmark = pytest.mark.e2e
SEED = "examples/seed-3m1w.yaml"
CONFIG = [p for p, kind, _ in RESET_TABLE if kind == "config"]
EVERYTHING = [p for p, _, _ in RESET_TABLE] + ["/var/lib/etcd"]


def _present(root: Path, paths: list[str]) -> list[str]:
    return [p for p in paths if (root / p.lstrip("/")).exists()]


def _pod_pids(root: Path) -> list[int]:
    docs = [json.loads(f.read_text()) for f in LabLayout(root).pods.glob("*.json")]
    return [d["pid"] for d in docs if isinstance(d.get("pid"), int)]


async def test_reset_one_node_then_delete_the_cluster(lab_factory, tmp_path):
    lab = lab_factory(SEED)
    assert await lab.install(timeout=480.0) == 0, lab.out.getvalue()  # a loaded 2-core machine
    c, workdir = lab.plan.cluster, str(lab.workdir)
    others = [n.hostname for n in lab.plan.nodes if n.hostname != "node1"]
    manifests = {h: sorted(p.name for p in (lab.host(h) / "etc/kubernetes/manifests").iterdir()) for h in others}
    before = lab.executions()

    # 1. reset node1 only
    rc, out = await bke_cli("reset", c, "--nodes", "node1", "--yes", "--workdir", workdir)
    assert rc == 0, out
    assert _present(lab.host("node1"), CONFIG) == []
    assert _present(lab.host("node1"), ["/usr/bin/kubelet"]) == ["/usr/bin/kubelet"]  # a reset keeps binaries
    for h in others:  # untouched: every static pod manifest and the etcd data still there
        assert sorted(p.name for p in (lab.host(h) / "etc/kubernetes/manifests").iterdir()) == manifests[h]
        assert (lab.host(h) / "var/lib/etcd").is_dir(), h
    new = [cid for cid in lab.executions() if cid not in before]
    reset_cmds = {parse_command_id(cid)[2] for cid in new if "/reset@" in cid}
    assert reset_cmds == {"node1", lab.plan.etcd_clusters[0].members[0].hostname}  # the node, the snapshot's member
    stray = [cid for cid in new if "/reset@" not in cid and not parse_command_id(cid)[1].startswith("health@")]
    assert stray == [], f"commands other than the reset's: {stray}"

    # 2. delete the cluster; keep a copy of one agent's creds, as a thief of that node's file would
    name = identity_name("agent", c, "master2")
    stolen = tmp_path / "stolen.creds"
    stolen.write_bytes(creds_path(lab.sup.workdir, name).read_bytes())
    agent_pids = dict(lab.sup.pids()["agents"])
    pod_pids = [pid for n in lab.plan.nodes for pid in _pod_pids(lab.host(n.hostname))]
    assert pod_pids, "the lab ran no real pod process (etcd)"
    rc, out = await bke_cli("delete", c, "--yes", "--workdir", workdir)
    assert rc == 0, out
    assert "removed by planner, certs, renderer, dispatcher, upgrader" in out
    for n in lab.plan.nodes:  # no file BKE wrote under any node root
        assert _present(lab.host(n.hostname), EVERYTHING) == [], n.hostname
    assert not [p for p in pod_pids if pid_alive(p)], "an etcd or pod process of the cluster is still running"
    assert not [p for p in agent_pids.values() if pid_alive(p)], "an agent (kubelet stand-in) of the cluster still runs"
    r = redis.Redis.from_url(lab.info.redis_url)
    try:
        assert sorted(r.scan_iter(match=f"bke:{c}:*")) == []
        for index in ("bke:clusters", "bke:installs", "bke:rotations", "bke:resets", "bke:upgrades"):
            assert not r.sismember(index, c), index
    finally:
        r.close()
    # refused by the server: nats-py reports the -ERR to its error callback and, its attempts
    # spent, raises "no servers available"; the server's own words are what is checked
    said: list[str] = []

    async def heard(exc: Exception) -> None:
        said.append(str(exc))

    with pytest.raises(nats.errors.Error):
        nc = await connect_nats(BusAccess(lab.info.nats_url, stolen, lab.agent_access("master2").inbox_prefix),
                                error_cb=heard)
        await nc.close()
    assert any(re.search("(?i)authoriz|revoked", m) for m in said), said
    # the snapshots BKE keeps aside: one taken by the reset, one by the delete
    rc, out = await bke_cli("etcd", "snapshots", c, "-o", "json", "--workdir", workdir)
    assert rc == 0, out
    assert len(json.loads(out)["snapshots"]) == 2
