"""End to end: `bke lab upgrade` on lab installs (real NATS, Redis, etcd; every service and
agent a process).

A split-etcd cluster goes one Kubernetes minor up, to a new containerd and (in the lab's terms)
a new etcd version. First a skipped minor and a stacked spec for the split cluster are refused,
each with its check, sending nothing. Then the upgrade, with the upgrader killed and restarted
once its etcd step runs: every node's files are then the new render's, every etcd cluster kept
quorum in every sample taken during the upgrade, every registered node was cordoned, drained and
uncordoned, snapshots of the three etcd clusters exist and one restores into a fresh etcd that
holds a key written before the upgrade, and no command ran twice. (A rolled-back node stopping
the upgrade: the real control plane's tests.)
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from bke.core.render import RenderInputs, render_cluster
from bke.adapters.runtime.etcd import mtls_context
from bke.core.upgrade import resolve_target
from bke.adapters.upgrade.quorum import MemberEndpoints, QuorumSampler
from bke.core.upgrade.target_plan import target_plan

from .lab_helpers import kill_upgrader_once
from .test_lab_install import SEED, SPLIT, assert_ran_once

pytestmark = pytest.mark.e2e
PKI = "etc/kubernetes/pki"
TO = "1.34.1"
# The lab has one etcd binary (3.5.1): a lab "etcd upgrade" rewrites each member's manifest and
# restarts it with that binary. 3.5.2 renders the same flags as 3.5.1 (only the image changes);
# 3.5.21 adds --experimental-compact-hash-check-enabled, which 3.5.1 refuses: the member would
# exit and be rolled back (the real control plane's rollback test shows that path with the apiserver).
ETCD_TO = "3.5.2"
CONTAINERD_TO = "2.2.0"
LB_FILES = ("haproxy", "keepalived", "check_apiserver")


def _bke(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bke_cli.main", *args], capture_output=True, text=True, timeout=timeout)


def _spec_copy(tmp_path: Path, spec: str, old: str, new: str, name: str | None = None) -> Path:
    """The example on loopback addresses of its own (another lab on this machine keeps its own)."""
    text = Path(spec).read_text().replace(old, new)
    out = tmp_path / (name or Path(spec).name)
    out.write_text(text)
    return out


def _samplers(plan, ctx: ssl.SSLContext) -> dict[str, QuorumSampler]:
    """One quorum sampler per etcd cluster (bke.adapters.upgrade.quorum): every member's /health on its
    metrics listener and its /v3/maintenance/status (leader, version) every 100 ms."""
    out = {}
    for c in plan.etcd_clusters:
        members = [MemberEndpoints(m.hostname, f"http://{m.client_url.split('//')[1].rsplit(':', 1)[0]}:{c.metrics_port}/health",
                                   m.client_url) for m in c.members]
        out[c.name] = QuorumSampler(members, every_s=0.1, timeout_s=1.0, client_tls=ctx)
    return out


def _put(url: str, ctx: ssl.SSLContext, key: str, value: str) -> None:
    import base64

    b = lambda s: base64.b64encode(s.encode()).decode()  # noqa: E731
    with httpx.Client(verify=ctx, trust_env=False, timeout=5.0) as c:
        r = c.post(f"{url}/v3/kv/put", json={"key": b(key), "value": b(value)})
        assert r.status_code == 200, r.text


def _new_render(plan):
    t = resolve_target(plan, TO, ETCD_TO, CONTAINERD_TO)
    new = target_plan(plan, t)
    return new, render_cluster(new, RenderInputs(vrrp_password="unused12"))


@pytest.mark.timeout(600)  # an install, then the upgrade of 18 nodes, beside the other tests
async def test_split_etcd_upgrade_one_minor_with_quorum_snapshots_and_drains(lab_factory, tmp_path):
    spec = _spec_copy(tmp_path, SPLIT, "127.0.20.", "127.0.94.")
    lab = lab_factory(str(spec))
    assert await lab.install() == 0, lab.out.getvalue()
    m1 = lab.plan.nodes_running("kube-apiserver")[0]
    data = lab.plan.etcd_cluster("etcd-data")
    root = lab.host(m1.hostname)
    ctx = mtls_context(*(root / PKI / f for f in ("etcd/ca.crt", "apiserver-etcd-client.crt", "apiserver-etcd-client.key")))
    await asyncio.to_thread(_put, data.members[0].client_url, ctx, "/before-upgrade", "kept")

    await _refused_before_anything_is_sent(lab, spec, tmp_path)

    # the upgrade, with the upgrader killed once the etcd step has started and started again:
    # the run goes on from its record
    samplers = _samplers(lab.plan, ctx)
    async with contextlib.AsyncExitStack() as stack:
        for sampler in samplers.values():
            await stack.enter_async_context(sampler)
        proc = subprocess.Popen([sys.executable, "-m", "bke_cli.main", "lab", "upgrade", str(spec), "--to", TO,
                                 "--etcd-version", ETCD_TO, "--containerd-version", CONTAINERD_TO,
                                 "--workdir", str(lab.workdir)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            # (a node rolled back stopping an upgrade: the real control plane's tests)
            await kill_upgrader_once(lab, "upgrade", "steps",
                                     lambda s: s["name"] == "etcd" and s["status"] in ("Running", "Succeeded"), "the etcd step")
            out, err = await asyncio.to_thread(proc.communicate, timeout=600)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, out + err
    assert "upgrade Succeeded" in out, out

    # quorum in every sample of every etcd cluster: a majority of members running. A member
    # rolled while it led makes the others answer /health false for a moment ("no leader", then
    # "leader changed"): such a pause must end quickly (one election timeout is 1 s; this
    # machine is shared, so 3 s), and it never counts as lost quorum while the members run.
    for name, sampler in samplers.items():
        assert len(sampler.samples) >= 10, (name, len(sampler.samples))
        below = sampler.below()
        assert not below, (name, len(below), below[0][1])
        for dip in sampler.dips():
            assert dip.end - dip.start < 3.0, (name, dip)

    # every node's files are the new version's render (load-balancer files are not upgraded)
    new_plan, rendered = _new_render(lab.plan)
    for node in rendered.nodes:
        for f in node.files:
            if any(x in f.path for x in LB_FILES):
                continue
            on_disk = (lab.host(node.hostname) / f.path.lstrip("/")).read_bytes()
            assert on_disk == f.content, (node.hostname, f.path)
    api = lab.manifest(m1.hostname, "kube-apiserver.yaml")
    assert api["spec"]["containers"][0]["image"].endswith(f":v{TO}")

    # drains recorded, in order, for every registered node; nothing else left cordoned
    status = await asyncio.to_thread(_bke, "upgrade", "status", lab.plan.cluster, "--workdir", str(lab.workdir), "-o", "json")
    assert status.returncode == 0, status.stderr
    view = json.loads(status.stdout)
    assert view["status"] == "Succeeded" and all(s["status"] == "Succeeded" for s in view["steps"])
    from redis import Redis

    r = Redis.from_url(lab.info.redis_url, decode_responses=True)
    drains = {h: json.loads(v) for h, v in r.hgetall(f"bke:{lab.plan.cluster}:upgrade:drain").items()}
    registered = {n.hostname for n in lab.plan.nodes if n.registers}
    assert set(drains) == registered | {n.hostname for n in lab.plan.nodes if not n.registers} & set(drains)
    for h, d in drains.items():
        assert d["cordoned"] <= d["drained"] <= d["uncordoned"], (h, d)
    # the stored plan is the upgraded one
    stored = json.loads(r.get(f"bke:{lab.plan.cluster}:plan"))
    assert stored["kubernetesVersion"] == f"v{TO}" and stored["etcdVersion"].lstrip("v") == ETCD_TO

    # snapshots of the three etcd clusters; one restores into a fresh etcd holding the key
    listed = await asyncio.to_thread(_bke, "etcd", "snapshots", lab.plan.cluster, "--workdir", str(lab.workdir), "-o", "json")
    assert listed.returncode == 0, listed.stderr
    snaps = json.loads(listed.stdout)["snapshots"]
    assert sorted({s["etcdCluster"] for s in snaps}) == sorted(c.name for c in lab.plan.etcd_clusters)
    assert all(s["requestId"] for s in snaps)  # taken by the upgrade's commands
    sid = next(s["snapshotId"] for s in snaps if s["etcdCluster"] == "etcd-data")
    into = tmp_path / "restored"
    restored = await asyncio.to_thread(_bke, "etcd", "restore", lab.plan.cluster, "--etcd-cluster", "etcd-data",
                                       "--snapshot", sid, "--into", str(into), "--workdir", str(lab.workdir), "--yes")
    assert restored.returncode == 0, restored.stdout + restored.stderr
    assert _restored_has(into, "/before-upgrade", "kept")
    assert_ran_once(lab)


def _restored_has(data_dir: Path, key: str, value: str) -> bool:
    """Start a plain etcd on the restored data dir and read the key."""
    import base64
    import socket
    import time

    from bke.adapters.runtime.binaries import etcd_bin

    def free() -> int:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    client, peer = free(), free()
    proc = subprocess.Popen([str(etcd_bin()), "--data-dir", str(data_dir), "--name", "restored",
                             "--listen-client-urls", f"http://127.0.0.1:{client}", "--advertise-client-urls", f"http://127.0.0.1:{client}",
                             "--listen-peer-urls", f"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                             "--initial-cluster", f"restored=http://127.0.0.1:{peer}", "--force-new-cluster"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                r = httpx.post(f"http://127.0.0.1:{client}/v3/kv/range", json={"key": base64.b64encode(key.encode()).decode()},
                               timeout=2.0, trust_env=False)
                kvs = r.json().get("kvs") or []
                return bool(kvs) and base64.b64decode(kvs[0]["value"]).decode() == value
            except (httpx.HTTPError, ValueError):
                time.sleep(0.2)  # polling the new etcd under a deadline
        raise AssertionError("the restored etcd did not answer")
    finally:
        proc.terminate()
        proc.wait(10)


async def _refused_before_anything_is_sent(lab, spec: Path, tmp_path: Path) -> None:
    """A target that skips a minor, and a spec that changes the etcd split, are refused at plan
    time (exit 2, the check's name), before any command is sent. Every refusal alone:
    tests/unit/core/upgrade/test_upgrade_paths.py."""
    workdir = str(lab.workdir)
    skip = await asyncio.to_thread(_bke, "lab", "upgrade", str(spec), "--to", "1.35.0", "--etcd-version", ETCD_TO,
                                   "--workdir", workdir)
    assert skip.returncode == 2 and "KubernetesOneMinor" in skip.stderr, skip.stdout + skip.stderr
    stacked = _spec_copy(tmp_path, SEED, "127.0.10.", "127.0.97.", name="seed-as-split.yaml")
    stacked.write_text(stacked.read_text().replace("name: seed", f"name: {lab.plan.cluster}"))
    refused = await asyncio.to_thread(_bke, "lab", "upgrade", str(stacked), "--to", TO, "--etcd-version", ETCD_TO,
                                      "--workdir", workdir)
    assert refused.returncode == 2 and "SplitUnchanged" in refused.stderr, refused.stdout + refused.stderr
    assert not any("upgrade@" in cid for cid in lab.executions())  # a refusal sends nothing
