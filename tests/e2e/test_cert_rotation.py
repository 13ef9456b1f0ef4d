"""End to end: `bke certs renew apiserver --cluster C --workdir DIR` on a lab install renews the
apiserver certificates through the certs service and the dispatcher delivers them to exactly
the apiserver nodes, one at a time, while every etcd member stays healthy."""
from __future__ import annotations

import asyncio
import json
import hashlib
import socket
import ssl
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from redis.asyncio import Redis

from bke.adapters.state.migrate import ensure_current
from bke.core.pki.material import cert_info
from bke.core.state.schema import RECORDS
from bke.adapters.runtime.etcd import mtls_context
from bke_dispatcher.ops.rotation.run import RotationStore

from .test_lab_install import SEED, assert_ran_once, flag

pytestmark = pytest.mark.e2e
PKI = "etc/kubernetes/pki"


def _tree(lab) -> dict[str, dict[str, str]]:
    """Every node's certificate and kubeconfig files: node path -> sha256."""
    out: dict[str, dict[str, str]] = {}
    for node in lab.plan.nodes:
        root = lab.host(node.hostname)
        files = [*(root / PKI).rglob("*"), *(root / "etc/kubernetes").glob("*.conf")]
        out[node.hostname] = {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
                              for p in files if p.is_file()}
    return out


def _etcd_healthy_once(url: str, ctx: ssl.SSLContext) -> None:
    """One probe, one new TLS handshake: no retry that could hide a moment of unhealthiness."""
    with httpx.Client(verify=ctx, trust_env=False, timeout=2.0) as client:
        resp = client.get(f"{url}/health")
        if resp.status_code != 200 or resp.json().get("health") != "true":
            raise AssertionError(f"HTTP {resp.status_code} {resp.text[:200]}")


def _served_serial(url: str, ctx: ssl.SSLContext) -> int:
    """The serial of the certificate a TLS listener presents now (client certificate sent)."""
    host, port = url.removeprefix("https://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as raw, ctx.wrap_socket(raw, server_hostname=host) as tls:
        return cert_info(ssl.DER_cert_to_PEM_cert(tls.getpeercert(binary_form=True)).encode()).serial


def _bke(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bke_cli.main", *args], capture_output=True, text=True, timeout=300)


def _seed_copy(tmp_path: Path) -> str:
    """The seed's spec on loopback addresses of its own: a lab of another test run on the same
    machine (with the seed's 127.0.10.x) then cannot hold this lab's ports."""
    spec = tmp_path / "seed-rotation.yaml"
    spec.write_text(Path(SEED).read_text().replace("127.0.10.", "127.0.93."))
    return str(spec)


async def test_renew_apiserver_rotates_onto_apiserver_nodes_only(lab_factory, tmp_path):
    lab = lab_factory(_seed_copy(tmp_path))
    assert await lab.install() == 0, lab.out.getvalue()
    apiservers = sorted(n.hostname for n in lab.plan.nodes if "kube-apiserver" in n.components)
    others = sorted(n.hostname for n in lab.plan.nodes if n.hostname not in apiservers)
    assert apiservers and others
    before = _tree(lab)
    old = {h: cert_info((lab.host(h) / PKI / "apiserver.crt").read_bytes()) for h in apiservers}

    # every etcd member is probed over mTLS, over and over, for as long as the rotation runs
    m1 = lab.host(apiservers[0])
    urls = flag(lab.manifest(apiservers[0], "kube-apiserver.yaml"), "etcd-servers").split(",")
    ctx = mtls_context(*(m1 / PKI / f for f in ("etcd/ca.crt", "apiserver-etcd-client.crt", "apiserver-etcd-client.key")))

    async def renew_while_probing(names: str, strict: bool = True) -> subprocess.CompletedProcess[str]:
        """Renew while every member is probed, round after round. `strict`: no probe may fail.
        Otherwise (the rotated certificates are etcd's own) every round must still find a quorum
        healthy, and a failure may only be a TLS handshake of one member: etcd reads its pair at
        each handshake, and one landing between the writes of the key and the certificate fails
        (see the reload table); its clients retry another member."""
        stop, probes, sick = asyncio.Event(), [0], []

        async def probe_etcd() -> None:
            while not stop.is_set():
                down = []
                for url in urls:
                    try:
                        await asyncio.to_thread(_etcd_healthy_once, url, ctx)
                    except Exception as exc:  # noqa: BLE001 - collected and asserted below
                        down.append(f"{url}: {exc}")
                if down:
                    sick.append(down)
                probes[0] += 1

        prober = asyncio.create_task(probe_etcd())
        try:
            done = await asyncio.to_thread(_bke, "certs", "renew", names, "--cluster", lab.plan.cluster,
                                           "--workdir", str(lab.workdir), "--timeout", "240")
        finally:
            stop.set()
            await prober
        assert done.returncode == 0, done.stdout + done.stderr
        assert "rotation Succeeded: 3/3 nodes" in done.stdout, done.stdout
        assert probes[0] >= 3, probes
        if strict:
            assert not sick, sick
        for down in sick:
            assert len(urls) - len(down) > len(urls) // 2, ("quorum lost", down)
            assert all("SSL" in d or "TLS" in d for d in down), down
        return done

    await renew_while_probing("apiserver")

    after = _tree(lab)
    changed = {h: sorted(p for p in after[h] if after[h][p] != before[h].get(p)) for h in after}
    for h in apiservers:
        assert changed[h] == [f"{PKI}/apiserver.crt", f"{PKI}/apiserver.key"], (h, changed[h])
        new = cert_info((lab.host(h) / PKI / "apiserver.crt").read_bytes())
        assert new.serial != old[h].serial and new.not_after >= old[h].not_after
        assert (new.cn, new.dns, new.ips) == (old[h].cn, old[h].dns, old[h].ips)
        # the (simulated) apiserver serves the new certificate without a restart, as upstream's does
        ip = lab.plan.node(h).ip
        served = await asyncio.to_thread(ssl.get_server_certificate, (ip, 6443))
        assert cert_info(served.encode()).serial == new.serial, h
    assert all(changed[h] == [] for h in others), changed
    assert set(after) == set(before) and all(set(after[h]) == set(before[h]) for h in after)

    # `bke status` (over the bus, as an operator reads it) shows the rotation finished
    shown = await asyncio.to_thread(_bke, "status", lab.plan.cluster, "--workdir", str(lab.workdir), "-o", "json")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    view = json.loads(shown.stdout)["rotation"]
    assert view is not None and view["status"] == "Succeeded" and (view["done"], view["total"]) == (3, 3)
    assert sorted(view["certificates"]) == [f"apiserver@{h}" for h in apiservers]
    assert [n["status"] for n in view["nodes"]] == ["Succeeded"] * 3 and view["finishedAt"]
    assert_ran_once(lab)

    # etcd's own serving and peer certificates: rotated member by member, etcd reads them at the
    # next handshake (no restart), and stays healthy throughout
    served = {u: await asyncio.to_thread(_served_serial, u, ctx) for u in urls}
    await renew_while_probing("etcd-data-server,etcd-data-peer", strict=False)
    for u in urls:
        assert await asyncio.to_thread(_served_serial, u, ctx) != served[u], u
    final = _tree(lab)
    for h in apiservers:
        assert sorted(p for p in final[h] if final[h][p] != after[h][p]) == [
            f"{PKI}/etcd/peer.crt", f"{PKI}/etcd/peer.key", f"{PKI}/etcd/server.crt", f"{PKI}/etcd/server.key"]

    # check-expiration reads the renewed store: the new dates
    shown = await asyncio.to_thread(_bke, "certs", "check-expiration", "--cluster", lab.plan.cluster,
                                    "--workdir", str(lab.workdir))
    assert shown.returncode == 0, shown.stderr
    for h in apiservers:
        new = cert_info((lab.host(h) / PKI / "apiserver.crt").read_bytes())
        line = next(line for line in shown.stdout.splitlines() if line.startswith(f"apiserver@{h} "))
        assert new.not_after.strftime("%b %d, %Y %H:%M UTC") in line

    # everything the install and the rotations stored carries its record's version
    await assert_every_record_current(lab)


async def assert_every_record_current(lab) -> None:
    """Everything today's services store for a cluster after an install and a certificate
    rotation carries its record's version, so `bke state migrate` finds nothing to convert. This
    is what makes a future conversion sound: a record without its version would be taken for the
    previous form and converted twice."""
    c, wd = lab.plan.cluster, str(lab.workdir)
    redis = Redis.from_url(lab.info.redis_url)
    try:
        report = await ensure_current(redis, c, dry_run=True)
    finally:
        await redis.aclose()
    # the records of other operations exist only once they ran (an upgrade, an etcd restore, a
    # reset, a join or removal of workers); the operation slot exists only while one runs: the
    # install and the rotation have freed it
    later = ("upgrade", "etcd-restore", "reset", "operation", "join", "removal")
    made = [k for k in RECORDS if k.name not in later]
    assert [(r.kind, r.found, r.header) for r in report.results if r.kind not in later] == [(k.name, k.current, True) for k in made]
    assert [(r.kind, r.found, r.header) for r in report.results if r.kind in later] == [
        (k.name, None, False) for k in RECORDS if k.name in later]
    migrated = await asyncio.to_thread(_bke, "state", "migrate", "--workdir", wd)
    assert migrated.returncode == 0, migrated.stderr
    assert f"{c}: every record current" in migrated.stdout


def test_cli_renew_refuses_bad_selection(tmp_path: Path):
    both = _bke("certs", "renew", "apiserver", "--within-days", "3", "--cluster", "c", "--nats", "nats://127.0.0.1:1")
    assert both.returncode == 2 and "exactly one of NAME" in both.stderr
    neither = _bke("certs", "renew", "--cluster", "c", "--nats", "nats://127.0.0.1:1")
    assert neither.returncode == 2 and "exactly one of NAME" in neither.stderr
    nowhere = _bke("certs", "renew", "all", "--cluster", "c", "--workdir", str(tmp_path))
    assert nowhere.returncode == 2 and "no running lab" in nowhere.stderr


async def test_restart_rows_and_a_failed_node_stop_the_rotation(lab_factory, tmp_path):
    """scheduler.conf needs its static pod restarted: a node whose restart fails stops the
    rotation as Failed with the reason, later nodes untouched; after the fix a new renewal
    delivers to every node. kubelet.conf goes to every node (etcd members first), with the
    kubelet restarted."""
    from bke_agent.lablayout import LabLayout

    lab = lab_factory(_seed_copy(tmp_path))
    assert await lab.install() == 0, lab.out.getvalue()
    c, wd = lab.plan.cluster, str(lab.workdir)
    before = _tree(lab)
    started = {h: LabLayout(lab.host(h)).pod_status("kube-scheduler")["startedAt"] for h in ("master1", "master2", "master3")}
    blocker = LabLayout(lab.host("master2")).fail_step_file("restart:kube-scheduler")
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_text("kube-scheduler would not stop (made to fail by the test)\n")

    failed = await asyncio.to_thread(_bke, "certs", "renew", "scheduler.conf", "--cluster", c, "--workdir", wd, "--timeout", "240")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "node master2 step restart:kube-scheduler: kube-scheduler would not stop" in failed.stderr
    mid = _tree(lab)
    conf = "etc/kubernetes/scheduler.conf"
    assert mid["master1"][conf] != before["master1"][conf] and mid["master3"][conf] == before["master3"][conf]
    assert LabLayout(lab.host("master1")).pod_status("kube-scheduler")["startedAt"] != started["master1"]
    assert LabLayout(lab.host("master3")).pod_status("kube-scheduler")["startedAt"] == started["master3"]
    redis = Redis.from_url(lab.info.redis_url)
    try:
        view = await RotationStore(redis).rotation_view(c)
        assert view["status"] == "Failed" and "master2" in view["message"]
        assert [(n["hostname"], n["status"]) for n in view["nodes"]] == [
            ("master1", "Succeeded"), ("master2", "Failed"), ("master3", "Pending")]

        blocker.unlink()
        again = await asyncio.to_thread(_bke, "certs", "renew", "scheduler.conf,kubelet.conf", "--cluster", c,
                                        "--workdir", wd, "--timeout", "240")
        assert again.returncode == 0, again.stdout + again.stderr
        view = await RotationStore(redis).rotation_view(c)
    finally:
        await redis.aclose()
    assert view["status"] == "Succeeded" and [n["hostname"] for n in view["nodes"]] == ["master1", "master2", "master3", "node1"]
    after = _tree(lab)
    for h in ("master1", "master2", "master3"):
        assert sorted(p for p in after[h] if after[h][p] != before[h][p]) == ["etc/kubernetes/kubelet.conf", conf]
        assert LabLayout(lab.host(h)).pod_status("kube-scheduler")["startedAt"] != started[h]
    assert sorted(p for p in after["node1"] if after["node1"][p] != before["node1"][p]) == ["etc/kubernetes/kubelet.conf"]
    assert_ran_once(lab)
