"""etcd disaster recovery through the bus and the agents, in a whole lab (three masters with a real
three-member etcd cluster, every agent a process with its own bus identity, the upgrader a
process): a key is written, the cluster is snapshotted, a second key is written; `bke etcd
restore --yes` asks the upgrader, which stops every apiserver and member through their agents,
delivers the snapshot sealed to each member's agent, restores each member as a new cluster and
starts everything again. Afterwards the first key is there on every member, the second is not,
the cluster is healthy and every apiserver stand-in runs again; a refused confirmation before
that stopped nothing."""
from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from redis import Redis

from bke.core.etcdsnap.step import snapshot_targets
from bke.adapters.runtime import etcd_put_get
from bke.adapters.runtime.etcd import mtls_context, wait_etcd_healthy
from bke.adapters.runtime.processes import pid_alive, stop_pid
from bke_agent.lablayout import LabLayout

from .snapshot_helpers import bke, take_snapshots
from .test_lab_install import assert_ran_once

# the CI budget (30 minutes): run by `python3 dev.py full`; in CI the split upgrade restores one of
# its snapshots into a fresh etcd (test_lab_upgrade) and tests/integration/test_etcd_snapshots.py
pytestmark = [pytest.mark.e2e, pytest.mark.slow]
SEED = "examples/seed-3m1w.yaml"


def _get(url: str, tls: tuple[Path, Path, Path], key: str) -> str | None:
    with httpx.Client(verify=mtls_context(*tls), trust_env=False, timeout=5.0) as client:
        body = client.post(f"{url}/v3/kv/range", json={"key": base64.b64encode(key.encode()).decode()}).json()
    kvs = body.get("kvs") or []
    return base64.b64decode(kvs[0]["value"]).decode() if kvs else None


async def test_restore_through_the_agents_brings_back_the_snapshot_and_restarts_every_apiserver(lab_factory):
    lab = lab_factory(SEED)
    assert await lab.install() == 0, lab.out.getvalue()
    cluster, plan = lab.plan.cluster, lab.plan
    data = plan.etcd_cluster("etcd-data")
    assert data is not None
    pki = lab.host(data.members[0].hostname) / "etc/kubernetes/pki"
    tls = (pki / "etcd/ca.crt", pki / "apiserver-etcd-client.crt", pki / "apiserver-etcd-client.key")

    before, after = "/registry/secrets/default/before-snapshot", "/registry/secrets/default/after-snapshot"
    assert await asyncio.to_thread(etcd_put_get, data.members[1].client_url, *tls, before, "kept") == "kept"
    targets = [t for t in snapshot_targets(plan) if t.etcd_cluster == "etcd-data"]
    await take_snapshots(lab, targets, "e2e-restore")
    assert await asyncio.to_thread(etcd_put_get, data.members[0].client_url, *tls, after, "gone") == "gone"
    listed = await asyncio.to_thread(bke, lab.operator_env(), "etcd", "snapshots", cluster, "--nats",
                                     lab.info.nats_url, "--etcd-cluster", "etcd-data")
    assert listed.returncode == 0, listed.stderr
    sid = next(w for w in listed.stdout.split() if w.endswith(f"-{targets[0].node}"))

    apiservers = [n.hostname for n in plan.nodes_running("kube-apiserver")]
    api_manifests = [lab.host(n) / "etc/kubernetes/manifests/kube-apiserver.yaml" for n in apiservers]
    argv = ("etcd", "restore", cluster, "--etcd-cluster", "etcd-data", "--snapshot", sid, "--workdir",
            str(lab.workdir))
    refused = await asyncio.to_thread(bke, {}, *argv)
    assert refused.returncode != 0 and "Aborted" in refused.stderr, refused.stdout + refused.stderr
    assert f"kube-apiserver on {apiservers[0]}" in refused.stdout and "restore-members" in refused.stdout
    assert all(p.exists() for p in api_manifests)  # the dry run stopped nothing

    proc = subprocess.Popen([sys.executable, "-m", "bke_cli.main", *argv, "--yes"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    # kill the upgrader once the members are being restored, and start it again: the run goes on
    r = Redis.from_url(lab.info.redis_url, decode_responses=True)
    try:
        deadline = asyncio.get_running_loop().time() + 120
        while asyncio.get_running_loop().time() < deadline:
            raw = r.get(f"bke:{cluster}:etcd-restore")
            if raw and any(s["name"] == "restore-members" and s["status"] != "Pending" for s in json.loads(raw)["stages"]):
                break
            await asyncio.sleep(0.05)  # polling the record under a deadline
        else:
            raise AssertionError("the restore-members stage never started")
    finally:
        r.close()
    pid = lab.sup.pids()["services"]["upgrader"]
    stop_pid(pid, timeout=0.0)  # SIGTERM then SIGKILL: killed mid-way
    assert not pid_alive(pid)
    lab.sup.ensure_services(lab.info, only=("upgrader",))
    out, err = await asyncio.to_thread(proc.communicate, timeout=600)
    assert proc.returncode == 0, out + err
    assert "etcd restore Succeeded: stage 6/6" in out, out
    assert_ran_once(lab)  # no completed command ran twice across the restart
    restore_cids = [c for c in lab.executions() if "/restore@" in c]
    assert len(restore_cids) == 5 * len(data.members), restore_cids  # five agent stages, each on the three masters

    assert all(p.exists() for p in api_manifests)
    for n in apiservers:  # the apiserver stand-ins run again
        name = lab.manifest(n, "kube-apiserver.yaml")["metadata"]["name"]
        status = LabLayout(lab.host(n)).pod_status(name)
        assert status is not None and status.get("phase") == "Running", (n, status)
    for m in data.members:
        host = lab.host(m.hostname)
        assert (host / f"{data.data_dir.lstrip('/')}.before-restore-{sid}/member").is_dir(), m.hostname  # old data kept
        assert not any((host / "var/lib/bke-agent/restore").iterdir()), m.hostname  # nothing received is left
        await asyncio.to_thread(wait_etcd_healthy, m.client_url, *tls, 30)
        assert await asyncio.to_thread(_get, m.client_url, tls, before) == "kept", m.hostname
        assert await asyncio.to_thread(_get, m.client_url, tls, after) is None, m.hostname
