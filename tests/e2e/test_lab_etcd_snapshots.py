"""etcd snapshots in a whole lab (split etcd: three real etcd clusters, every agent a process with
its own bus identity): BKE asks each etcd cluster's first member for a snapshot with a signed
`EtcdSnapshot` command, as the upgrader will (here the test publishes it with the dispatcher's
identity and the deployment's command key); every snapshot is listed by `bke etcd snapshots`;
one restores with `bke etcd restore --into` into a fresh etcd that holds data written before
the snapshot. (Restoring a lab's etcd cluster in place, through the agents: test_lab_etcd_restore.py.)"""
from __future__ import annotations

import asyncio
import base64
import json

import httpx
import pytest

from bke.core.etcdsnap.step import snapshot_targets
from bke.adapters.runtime import etcd_put_get, free_port, start_etcd

from .snapshot_helpers import bke, take_snapshots

# slow: a split lab of its own (~160 s); the upgrade e2e also restores one of its snapshots into a
# fresh etcd, and test_lab_etcd_restore.py restores one through the agents (`python3 dev.py full`)
pytestmark = [pytest.mark.e2e, pytest.mark.slow]
SPLIT = "examples/split-etcd.yaml"


async def test_split_etcd_snapshots_listed_and_one_restores_into_a_fresh_etcd(lab_factory, tmp_path):
    lab = lab_factory(SPLIT)
    assert await lab.install() == 0, lab.out.getvalue()
    cluster, plan = lab.plan.cluster, lab.plan

    # data written before the snapshot, with the apiserver's etcd client certificate
    pki = lab.host("m1") / "etc/kubernetes/pki"
    data = plan.etcd_cluster("etcd-data")
    assert data is not None
    tls = (pki / "etcd/ca.crt", pki / "apiserver-etcd-client.crt", pki / "apiserver-etcd-client.key")
    written = {f"/registry/secrets/default/e2e-{i}": f"before-snapshot-{i}" for i in range(3)}
    for k, v in written.items():
        assert await asyncio.to_thread(etcd_put_get, data.members[1].client_url, *tls, k, v) == v

    targets = snapshot_targets(plan)
    assert [t.etcd_cluster for t in targets] == ["etcd-data", "etcd-events", "etcd-pods"]
    skey = await take_snapshots(lab, targets, "e2e")

    listed = await asyncio.to_thread(bke, lab.operator_env(), "etcd", "snapshots", cluster,
                                     "--nats", lab.info.nats_url, "-o", "json")
    assert listed.returncode == 0, listed.stderr
    snaps = json.loads(listed.stdout)["snapshots"]
    assert sorted((s["etcdCluster"], s["member"]) for s in snaps) == [
        ("etcd-data", "etcd1"), ("etcd-events", "events1"), ("etcd-pods", "pods1")]
    assert all(s["sealedTo"] == skey.key_id and s["requestId"] == "e2e" for s in snaps)
    sid = next(s["snapshotId"] for s in snaps if s["etcdCluster"] == "etcd-data")

    into = tmp_path / "restored-etcd-data"
    done = await asyncio.to_thread(bke, {}, "etcd", "restore", cluster, "--etcd-cluster", "etcd-data",
                                   "--snapshot", sid, "--into", str(into), "--workdir", str(lab.workdir))
    assert done.returncode == 0, done.stderr
    client, peer = free_port(), free_port()
    url = f"http://127.0.0.1:{client}"
    proc = start_etcd(["--name", "etcd1", "--data-dir", str(into), "--listen-client-urls", url,
                       "--advertise-client-urls", url, "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                       "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                       "--listen-metrics-urls", f"http://127.0.0.1:{free_port()}"], tmp_path / "restored.log")
    try:
        async with httpx.AsyncClient(trust_env=False, timeout=2.0) as http:
            deadline = asyncio.get_running_loop().time() + 30
            while True:
                proc.ensure_running()
                try:
                    if (await http.get(f"{url}/health")).json().get("health") == "true":
                        break
                except httpx.HTTPError:
                    pass
                assert asyncio.get_running_loop().time() < deadline, "the restored etcd never became healthy"
                await asyncio.sleep(0.1)
            for k, v in written.items():
                resp = await http.post(f"{url}/v3/kv/range", json={"key": base64.b64encode(k.encode()).decode()})
                kvs = resp.json().get("kvs") or []
                assert kvs and base64.b64decode(kvs[0]["value"]).decode() == v, k
    finally:
        proc.stop()
