"""Joins and a removal by `bke lab apply`, on an installed lab (test_lab_apply.py runs them on its
lab, after its applies): two workers join, then one leaves the same way. Real NATS, Redis and
etcd; every service and agent its own process.

On the installed seed example, `bke lab apply` of the same spec with two more BKENodes starts the
two agents (the lab plays the machines coming up), and the upgrader's apply run swaps in the new
plan and asks the dispatcher to join them (JoinNodes, inside the apply's operation slot). Both new
nodes end with every file a worker has, each of the install's worker phases run on them once,
and no other node received any command but the periodic health checks. Then `bke lab apply` of
the spec without one of them: drained and its Node deleted (recorded by the lab), reset (no file
BKE wrote left on its tree), its identity revoked and its agent stopped, no other node
commanded, and the stored plan no longer names it. A master is refused by name, nothing done,
by `bke lab remove-nodes` and by an apply without it."""
from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import redis

from bke.adapters.auth.permissions import identity_name
from bke.core.plan import plan_spec_text
from bke.adapters.state.keys.plan import plan_meta_key
from bke.adapters.state.plans import plan_digest
from bke_agent.journal import read_executions
from bke_agent.reset import RESET_TABLE
from bke_agent.settings import LAB_STATE_SUBDIR
from bke_dispatcher.command_ids import parse_command_id

BKE = str(Path(sys.executable).parent / "bke")


def extra_nodes(net: str) -> bytes:
    """Two more workers, node2 and node3, and a master without etcd, master4, on the lab's
    network `net` (the first three octets)."""
    return "".join(f"""
---
apiVersion: bke.bocloud.com/v1beta1
kind: BKENode
metadata: {{name: seed-{h}}}
spec: {{hostname: {h}, ip: {net}.{i}, role: [{role}]}}""" for h, i, role in (
        ("node2", 5, "node"), ("node3", 6, "node"), ("master4", 9, "master/node"))).encode() + b"\n"


EVERYTHING = [p for p, _, _ in RESET_TABLE] + ["/usr/bin/kubelet"]


async def bke_cli(*args: str, timeout: float = 600.0) -> tuple[int, str]:
    """The `bke` command as a user runs it (none of the test's BKE_* settings), its exit code and
    output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BKE_")}
    proc = await asyncio.create_subprocess_exec(BKE, *args, env=env, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    return proc.returncode or 0, out.decode()


def _executions(lab, hosts) -> dict[str, list[str]]:
    return {h: [rec.commandId for rec in read_executions(lab.host(h) / LAB_STATE_SUBDIR)] for h in hosts}


def _files(root: Path) -> set[str]:
    """Every file BKE wrote under a node's /etc/kubernetes and /var/lib/kubelet, relative."""
    out = set()
    for top in ("etc/kubernetes", "var/lib/kubelet"):
        base = root / top
        out |= {str(p.relative_to(root)) for p in base.rglob("*") if p.is_file()} if base.is_dir() else set()
    return out


def _stray(before: dict[str, list[str]], after: dict[str, list[str]]) -> dict[str, list[str]]:
    """Commands a node ran since `before` other than the periodic health checks."""
    out = {}
    for h, cids in after.items():
        new = [c for c in cids if c not in set(before.get(h, []))]
        other = [c for c in new if not parse_command_id(c)[1].startswith("health@")]
        if other:
            out[h] = other
    return out


async def joins_and_a_removal(lab, spec: bytes, net: str) -> None:
    """On an installed seed lab whose spec is `spec`: two workers and a master (without etcd)
    added by `bke lab apply`, a refused change, then one worker and the master removed by
    `bke lab apply` (workers joined and removed, and the control plane scaled out and in)."""
    c, workdir = lab.plan.cluster, str(lab.workdir)
    old_hosts = [n.hostname for n in lab.plan.nodes]

    # 1. the spec that names two more workers and a master, applied: their agents started, the
    # plan swapped, joined
    bigger_spec = lab.workdir / "bigger.yaml"
    bigger_spec.write_bytes(spec + extra_nodes(net))
    before = _executions(lab, old_hosts)
    rc, out = await bke_cli("lab", "apply", str(bigger_spec), "--workdir", workdir)
    assert rc == 0, out
    assert "join-nodes: 3 node(s)" in out and "apply Succeeded" in out, out
    bigger = plan_spec_text(bigger_spec.read_text()).plan
    assert bigger is not None
    rs = redis.Redis.from_url(lab.info.redis_url)
    try:
        assert rs.hget(plan_meta_key(c), "digest").decode() == plan_digest(bigger.to_json())
    finally:
        rs.close()
    joined = _executions(lab, ["node2", "node3"])
    for h in ("node2", "node3"):
        phases = [parse_command_id(cid) for cid in joined[h] if "/join@" in cid]
        assert [p[3] for p in phases] == [0, 1, 2, 3], joined[h]  # node-env, certs, workers, health: once each
        # the same files as the worker installed with the cluster (names; contents are per node)
        assert _files(lab.host(h)) == _files(lab.host("node1")), h
        assert (lab.host(h) / "etc/kubernetes/pki/ca.crt").is_file()
    master4 = [parse_command_id(cid) for cid in _executions(lab, ["master4"])["master4"] if "/join@" in cid]
    assert [p[3] for p in master4] == [0, 1, 2, 3], master4  # node-env, certs, control-plane-join, health
    for component in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        assert (lab.host("master4") / f"etc/kubernetes/manifests/{component}.yaml").is_file(), component
    assert not (lab.host("master4") / "etc/kubernetes/manifests/etcd.yaml").exists()
    after_join = _executions(lab, old_hosts)
    assert _stray(before, after_join) == {}, "a node outside the join received a command"
    rs = redis.Redis.from_url(lab.info.redis_url)
    try:
        assert rs.hexists(f"bke:{c}:node-labels", "node2") and rs.hexists(f"bke:{c}:node-labels", "node3")
    finally:
        rs.close()

    # 3. refused by name, nothing done: a master removed by the workers' own command
    rc, out = await bke_cli("lab", "remove-nodes", c, "--nodes", "master1", "--workdir", workdir)
    assert rc == 2 and "master1 (etcd member of etcd-data)" in out, out
    # node1, the worker installed with the cluster, made a master: it joins again with its new
    # roles (node-env, certs, control-plane-join, health: ensures; its running kubelet's port
    # not counted as taken), its control plane comes up, no other node is commanded
    roles = lab.workdir / "roles.yaml"
    roles.write_text(bigger_spec.read_text().replace(f"hostname: node1, ip: {net}.4, role: [node]",
                                                     f"hostname: node1, ip: {net}.4, role: [master/node]"))
    assert roles.read_text() != bigger_spec.read_text()
    everyone = old_hosts + ["node2", "node3", "master4"]
    before = _executions(lab, everyone)
    rc, out = await bke_cli("lab", "apply", str(roles), "--workdir", workdir)
    assert rc == 0 and "apply Succeeded" in out, out
    after = _executions(lab, everyone)
    rejoined = [parse_command_id(cid) for cid in after["node1"] if cid not in set(before["node1"]) and "/join@" in cid]
    assert [p[3] for p in rejoined] == [0, 1, 2, 3], rejoined  # node-env, certs, control-plane-join, health
    for component in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        assert (lab.host("node1") / f"etc/kubernetes/manifests/{component}.yaml").is_file(), component
    assert (lab.host("node1") / "etc/kubernetes/pki/apiserver.key").is_file()
    assert _stray(before, {h: v for h, v in after.items() if h != "node1"}) == {}, "another node was commanded"
    # and back to a worker: its bundle sealed again without a master's files, its static pods'
    # manifests taken away, then the certificates, keys and kubeconfigs only a master holds
    before = after
    rc, out = await bke_cli("lab", "apply", str(bigger_spec), "--workdir", workdir)
    assert rc == 0 and "apply Succeeded" in out, out
    node1 = lab.host("node1")
    for component in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        assert not (node1 / f"etc/kubernetes/manifests/{component}.yaml").exists(), component
    for left in ("pki/apiserver.key", "pki/ca.key", "pki/sa.key", "admin.conf", "controller-manager.conf"):
        assert not (node1 / f"etc/kubernetes/{left}").exists(), left
    assert (node1 / "etc/kubernetes/kubelet.conf").is_file() and (node1 / "etc/kubernetes/pki/ca.crt").is_file()
    after = _executions(lab, everyone)
    shed = [parse_command_id(cid)[1].rsplit("@", 1)[1] for cid in after["node1"] if cid not in set(before["node1"])
            and "/health@" not in cid]
    assert shed == ["kube-apiserver", "kube-controller-manager", "kube-scheduler", "cleanup"], shed
    assert _stray(before, {h: v for h, v in after.items() if h != "node1"}) == {}, "another node was commanded"

    # 4. node3 and master4 leave: the spec without them, applied: drained and their Nodes deleted
    # (recorded), reset, revoked, their agents stopped, forgotten
    before = _executions(lab, everyone)
    smaller_spec = lab.workdir / "smaller.yaml"
    smaller_spec.write_text("\n---\n".join(d for d in bigger_spec.read_text().split("\n---\n")
                                           if "hostname: node3" not in d and "hostname: master4" not in d))
    rc, out = await bke_cli("lab", "apply", str(smaller_spec), "--workdir", workdir)
    assert rc == 0, out
    assert "remove-nodes: 2 node(s)" in out and "node3: agent stopped" in out, out
    assert "master4: agent stopped" in out, out
    assert not (lab.host("master4") / "etc/kubernetes/manifests/kube-apiserver.yaml").exists()
    rs = redis.Redis.from_url(lab.info.redis_url)
    try:
        api = rs.hget(f"bke:{c}:removal:api", "node3")
        assert api is not None and all(k in api.decode() for k in ("cordoned", "drained", "deleted"))
        assert not rs.hexists(f"bke:{c}:agents:accepted", "node3") and not rs.sismember(f"bke:{c}:sealed", "node3")
        record = rs.hget("bke:auth:identities", identity_name("agent", c, "node3"))
        assert record is not None and b'"revoked_at": null' not in record
        smaller = plan_spec_text(smaller_spec.read_text()).plan
        assert smaller is not None and "node3" not in {n.hostname for n in smaller.nodes}
        assert rs.hget(plan_meta_key(c), "digest").decode() == plan_digest(smaller.to_json())  # swapped at the end
    finally:
        rs.close()
    left = [p for p in EVERYTHING if (lab.host("node3") / p.lstrip("/")).exists()]
    assert left == [], f"files BKE wrote still on node3: {left}"
    after = _executions(lab, everyone)
    removal = [cid for cid in after["node3"] if cid not in set(before["node3"])]
    assert [parse_command_id(cid)[1].split("@")[0] for cid in removal if "/remove@" in cid] == ["remove"]
    assert _stray(before, {h: v for h, v in after.items() if h not in ("node3", "master4")}) == {}, \
        "another node was commanded"
    assert "node3" not in lab.sup.pids()["agents"]  # its agent process stopped

    # 5. the certs service forgets node3 and master4 on remove-nodes.finished (its own consumer,
    # a moment after the run saw the event): no agent key, registration, sealed bundle or
    # private key of theirs left
    def certs_forgot() -> bool:
        rs = redis.Redis.from_url(lab.info.redis_url)
        try:
            keys = rs.hkeys(f"bke:{c}:pki:keys")
            return not any([*(rs.hexists(f"bke:{c}:{k}", h) for k in ("agents:provisioned", "certs:agents", "files:certs")
                              for h in ("node3", "master4")),
                            any(k.endswith((b"@node3", b"@master4")) for k in keys)])
        finally:
            rs.close()

    deadline = asyncio.get_running_loop().time() + 30
    while not certs_forgot():
        assert asyncio.get_running_loop().time() < deadline, "the certs service still holds a removed node's keys"
        await asyncio.sleep(0.2)  # polling another process's records under a deadline
    # `bke status` lists the last join and removal
    rc, out = await bke_cli("status", c, "-o", "json", "--nodes", "none", "--workdir", workdir)
    assert rc == 0, out
    doc = json.loads(out[out.index("{"):])  # what the CLI printed (stderr shares the stream)
    assert doc["join"]["status"] == "Succeeded" and doc["join"]["nodes"]
    assert sorted(n["hostname"] for n in doc["removal"]["nodes"]) == ["master4", "node3"]
    assert doc["removal"]["status"] == "Succeeded" and {n["stage"] for n in doc["removal"]["nodes"]} == {"done"}
