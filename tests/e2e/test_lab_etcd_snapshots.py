"""etcd snapshots in a whole lab (split etcd: three real etcd clusters, every agent a process with
its own bus identity): BKE asks each etcd cluster's first member for a snapshot with a signed
`EtcdSnapshot` command, as the upgrader will (here the test publishes it with the dispatcher's
identity and the deployment's command key); every snapshot is listed by `bke etcd snapshots`;
one restores with `bke etcd restore --into` into a fresh etcd that holds data written before
the snapshot; then `bke etcd restore --workdir` restores the lab's etcd-data cluster itself (after
a refused confirmation that stops nothing): every member on the snapshot's data as a new cluster,
the key written after the snapshot gone, every apiserver back."""
from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import httpx
import pytest
from redis import Redis

from bke.auth.permissions import inbox_prefix
from bke.bus.connect import BusAccess, connect_nats
from bke.contracts.agent import AgentCommand, CommandResult, agent_subject
from bke.etcdsnap.step import snapshot_step, snapshot_targets
from bke.etcdsnap.store import ensure_snapshot_bucket
from bke.lab.identities import creds_path
from bke.runtime import etcd_put_get, free_port, start_etcd
from bke.runtime.etcd import mtls_context, wait_etcd_healthy
from bke.secrets import load_secret_box
from bke.secrets.signing import ensure_command_key_sync, sign_command
from bke.secrets.snapshot_key import ensure_snapshot_key_sync
from bke.state.keys import command_signing_key, etcd_snapshot_key

pytestmark = pytest.mark.e2e
SPLIT = "examples/split-etcd.yaml"


def _bke(lab_env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("BKE_")}, **lab_env, "COLUMNS": "200"}
    return subprocess.run([str(Path(sys.executable).parent / "bke"), *argv], capture_output=True, text=True,
                          timeout=300, env=env, check=False, stdin=subprocess.DEVNULL)


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

    # the deployment's keys, from the lab's state (made once; the snapshot key on first use)
    r = Redis.from_url(lab.info.redis_url)
    try:
        box = load_secret_box(lab.workdir / "secret.key")
        signer = ensure_command_key_sync(r, command_signing_key(), box)
        skey = ensure_snapshot_key_sync(r, etcd_snapshot_key(), box)
    finally:
        r.close()
    operator = await connect_nats(lab.access)
    await ensure_snapshot_bucket(operator.jetstream())
    await operator.close()

    dispatcher = await connect_nats(BusAccess(lab.info.nats_url, creds_path(lab.workdir, "dispatcher"),
                                              inbox_prefix("dispatcher"), lab.access.tls_ca))
    try:
        now = datetime.now(timezone.utc)
        targets = snapshot_targets(plan)
        assert [t.etcd_cluster for t in targets] == ["etcd-data", "etcd-events", "etcd-pods"]
        subs = {t.node: await dispatcher.subscribe(agent_subject(cluster, t.node, "result")) for t in targets}
        for t in targets:
            step = snapshot_step(plan, t.etcd_cluster, t.node, skey.public_b64, now, request_id="e2e")
            cmd = AgentCommand(command_id=f"{cluster}/etcd-snapshots/{t.etcd_cluster}", cluster=cluster, node=t.node,
                               phase="etcd-snapshots", issued_at=now.isoformat(), steps=[step])
            await dispatcher.jetstream().publish(agent_subject(cluster, t.node, "command"),
                                                 sign_command(cmd, signer).to_bytes())
        for t in targets:
            result = CommandResult.model_validate_json((await subs[t.node].next_msg(timeout=120)).data)
            assert result.status == "Succeeded", result.model_dump_json(indent=1)
            assert "etcd's hash checked" in result.steps[0].stdout
    finally:
        await dispatcher.close()

    listed = await asyncio.to_thread(_bke, lab.operator_env(), "etcd", "snapshots", cluster,
                                     "--nats", lab.info.nats_url, "-o", "json")
    assert listed.returncode == 0, listed.stderr
    snaps = json.loads(listed.stdout)["snapshots"]
    assert sorted((s["etcdCluster"], s["member"]) for s in snaps) == [
        ("etcd-data", "etcd1"), ("etcd-events", "events1"), ("etcd-pods", "pods1")]
    assert all(s["sealedTo"] == skey.key_id and s["requestId"] == "e2e" for s in snaps)
    sid = next(s["snapshotId"] for s in snaps if s["etcdCluster"] == "etcd-data")

    into = tmp_path / "restored-etcd-data"
    done = await asyncio.to_thread(_bke, {}, "etcd", "restore", cluster, "--etcd-cluster", "etcd-data",
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

    # the lab's etcd-data cluster itself: a key written after the snapshot is gone afterwards
    after = "/registry/secrets/default/e2e-after"
    assert await asyncio.to_thread(etcd_put_get, data.members[0].client_url, *tls, after, "after") == "after"
    api_manifests = [lab.host(n.hostname) / "etc/kubernetes/manifests/kube-apiserver.yaml"
                     for n in plan.nodes_running("kube-apiserver")]
    refused = await asyncio.to_thread(_bke, {}, "etcd", "restore", cluster, "--etcd-cluster", "etcd-data",
                                      "--snapshot", sid, "--workdir", str(lab.workdir))
    assert refused.returncode != 0 and "kube-apiserver on m1" in refused.stdout and "Aborted" in refused.stderr
    assert all(p.exists() for p in api_manifests)  # nothing was stopped
    done = await asyncio.to_thread(_bke, {}, "etcd", "restore", cluster, "--etcd-cluster", "etcd-data",
                                   "--snapshot", sid, "--workdir", str(lab.workdir), "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "every kube-apiserver runs again" in done.stdout
    assert all(p.exists() for p in api_manifests)
    for m in data.members:
        host = lab.host(m.hostname)
        assert (host / f"var/lib/etcd.before-restore-{sid}/member").is_dir(), m.hostname  # the old data, kept
        assert not any((host / "var/lib/bke-agent/restore").iterdir()), m.hostname  # no clear snapshot left
        await asyncio.to_thread(wait_etcd_healthy, m.client_url, *tls, 30)
        for k, v in written.items():
            assert await asyncio.to_thread(_get, m.client_url, tls, k) == v, (m.hostname, k)
        assert await asyncio.to_thread(_get, m.client_url, tls, after) is None, m.hostname


def _get(url: str, tls: tuple[Path, Path, Path], key: str) -> str | None:
    with httpx.Client(verify=mtls_context(*tls), trust_env=False, timeout=5.0) as client:
        body = client.post(f"{url}/v3/kv/range", json={"key": base64.b64encode(key.encode()).decode()}).json()
    kvs = body.get("kvs") or []
    return base64.b64decode(kvs[0]["value"]).decode() if kvs else None
